#include "ui/theme.h"

#include <QApplication>
#include <QPalette>
#include <QPointer>
#include <QSettings>
#include <QStyleFactory>
#include <cstring>
#include <utility>
#include <vector>

namespace tandem::ui::theme {
namespace {

constexpr Colors kLight = {"#2f6fdb", "#1f9d55", "#d97706", "#d14343", "#5f6b7a", "#1d2430",
                           "#dcfce7", "#14532d", "#eef0f3", "#8b5cf6", "#2f6fdb", "#f4f6f9",
                           "#ffffff", "#e9edf2", "#dde2e8", "#e8f0fe", "#f1f3f6", "#eef2ff",
                           "#c7d2fe", "#fff7ed", "#9a3412", "#fed7aa"};
constexpr Colors kDark = {"#5b8def", "#34c47c", "#f0a43a", "#f07070", "#9aa6b5", "#e6e9ef",
                          "#1f4d33", "#b7f0cd", "#2a303b", "#a78bfa", "#5b8def", "#161a21",
                          "#1f242d", "#1a1e25", "#2f3642", "#24344f", "#2a303b", "#1e2740",
                          "#34406b", "#3a2416", "#f5c29a", "#6b3a1c"};

Scheme g_scheme = Scheme::Light;

struct Follower {
  QPointer<QObject> context;
  std::function<void()> restyle;
};
// UI thread only, as every widget.
std::vector<Follower>& followers() {
  static std::vector<Follower> list;
  return list;
}

// The desktop's preference, as far as Qt 6.4 can tell: GTK_THEME's ":dark" variant, or a
// dark platform palette (KDE, and GNOME with a platform theme plugin).
bool desktop_prefers_dark(const QApplication& app) {
  const QByteArray gtk = qgetenv("GTK_THEME");
  if (gtk.endsWith(":dark") || gtk.toLower().contains("-dark")) return true;
  return app.palette().color(QPalette::Window).lightness() < 128;
}

}  // namespace

const Colors& colors() {
  return g_scheme == Scheme::Dark ? kDark : kLight;
}
Scheme scheme() {
  return g_scheme;
}

void apply(QApplication& app, const char* scheme_setting) {
  QByteArray wanted = qgetenv("TANDEM_THEME");
  if (wanted.isEmpty() && scheme_setting != nullptr) wanted = scheme_setting;
  if (wanted.isEmpty()) wanted = QSettings().value(QStringLiteral("ui/theme")).toString().toUtf8();
  g_scheme = wanted == "dark"            ? Scheme::Dark
             : wanted == "light"         ? Scheme::Light
             : desktop_prefers_dark(app) ? Scheme::Dark
                                         : Scheme::Light;
  const Colors& c = colors();
  app.setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
  QPalette p;
  p.setColor(QPalette::Window, QColor(c.page));
  p.setColor(QPalette::Base, QColor(c.surface));
  p.setColor(QPalette::AlternateBase, QColor(c.track));
  p.setColor(QPalette::Text, QColor(c.text));
  p.setColor(QPalette::WindowText, QColor(c.text));
  p.setColor(QPalette::Button, QColor(c.surface));
  p.setColor(QPalette::ButtonText, QColor(c.text));
  p.setColor(QPalette::Highlight, QColor(c.accent));
  p.setColor(QPalette::HighlightedText, Qt::white);
  p.setColor(QPalette::ToolTipBase, QColor(g_scheme == Scheme::Dark ? "#e6e9ef" : "#1d2430"));
  p.setColor(QPalette::ToolTipText, QColor(g_scheme == Scheme::Dark ? "#161a21" : "#ffffff"));
  p.setColor(QPalette::PlaceholderText, QColor(c.muted_text));
  p.setColor(QPalette::Disabled, QPalette::Text, QColor(c.muted_text));
  p.setColor(QPalette::Disabled, QPalette::ButtonText, QColor(c.muted_text));
  p.setColor(QPalette::Disabled, QPalette::WindowText, QColor(c.muted_text));
  app.setPalette(p);
  const bool dark = g_scheme == Scheme::Dark;
  app.setStyleSheet(
      QStringLiteral(R"(
    QFrame#card { background: %1; border: 1px solid %2; border-radius: 8px; }
    QLabel#cardTitle { font-weight: 600; font-size: 11pt; color: %3; }
    QLabel#pageTitle { font-size: 17pt; font-weight: 600; }
    QLabel#pageSubtitle { color: %4; }
    QWidget#systemContent, QWidget#chatPage, QWidget#downloadsPage { background: %5; }
    QListWidget#navigation { background: %6; border: none; border-right: 1px solid %2;
                             padding-top: 8px; font-size: 10.5pt; }
    QListWidget#navigation::item { padding: 9px 12px; margin: 2px 6px; border-radius: 6px; color: %3; }
    QListWidget#navigation::item:selected { background: %1; color: %7; }
    QLabel#emptyTitle { font-size: 15pt; font-weight: 600; }
    QLabel#emptyText { color: %4; font-size: 10.5pt; }
    QStatusBar { background: %6; border-top: 1px solid %2; }
    QStatusBar QLabel { color: %3; padding: 0 8px; }
    QDockWidget::title { background: %6; padding: 6px; font-weight: 600; }
    QPushButton { padding: 5px 14px; border: 1px solid %2; border-radius: 6px; background: %1; }
    QPushButton:hover { border-color: %7; }
    QPushButton#primary { background: %7; color: white; border-color: %7; }
    QPushButton:disabled { color: %4; background: %8; border-color: %2; }
    QPushButton#primary:disabled { color: %9; background: %10; border-color: %10; }
  )")
          .arg(c.surface, c.border, c.text, c.muted_text, c.page, c.sidebar, c.accent, c.track)
          .arg(dark ? "#8a94a6" : "#eef2f8", dark ? "#2c3e63" : "#a9bfe6"));

  std::vector<Follower>& list = followers();
  std::erase_if(list, [](const Follower& f) { return f.context.isNull(); });
  // A restyle may add followers (a widget built anew): iterate over a copy.
  const std::vector<Follower> now = list;
  for (const Follower& f : now)
    if (!f.context.isNull()) f.restyle();
}

void follow(QObject* context, std::function<void()> restyle) {
  restyle();
  std::vector<Follower>& list = followers();
  std::erase_if(list, [](const Follower& f) { return f.context.isNull(); });
  list.push_back({context, std::move(restyle)});
}

}  // namespace tandem::ui::theme
