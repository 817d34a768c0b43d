// Colours and the application style sheet: one place, so every page looks the same, in a
// light and a dark scheme. The scheme follows the desktop (its palette, GTK_THEME), unless
// the Preferences' "ui/theme" setting or TANDEM_THEME says light or dark.
#pragma once

#include <functional>

class QApplication;
class QObject;

namespace tandem::ui::theme {

enum class Scheme { Light, Dark };

struct Colors {
  const char* accent;
  const char* good;
  const char* warning;
  const char* error;
  const char* muted_text;
  const char* text;
  const char* chip_on;
  const char* chip_on_text;
  const char* chip_off;
  const char* prompt;
  const char* decode;
  const char* page;     // behind the cards
  const char* surface;  // cards, replies, the heat map's empty cells
  const char* sidebar;  // navigation, conversation list, status bar
  const char* border;
  const char* user_bubble;
  const char* track;   // empty bars
  const char* notice;  // an information banner and its border
  const char* notice_border;
  const char* problem;  // an error banner, its text and border
  const char* problem_text;
  const char* problem_border;
};

// The colours of the scheme in use.
const Colors& colors();
Scheme scheme();

// Fusion style, the scheme's palette and the style sheet for cards, titles and the sidebar.
// `scheme_setting`: "light", "dark", or anything else to follow the desktop.
// Applying again (the Preferences' theme changed) restyles the running window: the palette
// and style sheet at once, and each widget that baked colours in through follow().
void apply(QApplication& app, const char* scheme_setting = nullptr);

// Calls `restyle` now, and again after each apply(), for as long as `context` lives: the
// place for a widget's own style sheets and pens, which the palette does not reach.
void follow(QObject* context, std::function<void()> restyle);

}  // namespace tandem::ui::theme
