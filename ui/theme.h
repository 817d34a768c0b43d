// Colours and the application style sheet: one place, so every page looks the same.
#pragma once

class QApplication;

namespace tandem::ui::theme {

inline constexpr const char* kAccent = "#2f6fdb";
inline constexpr const char* kGood = "#1f9d55";
inline constexpr const char* kWarning = "#d97706";
inline constexpr const char* kError = "#d14343";
inline constexpr const char* kMutedText = "#5f6b7a";
inline constexpr const char* kChipOn = "#dcfce7";
inline constexpr const char* kChipOnText = "#14532d";
inline constexpr const char* kChipOff = "#eef0f3";
inline constexpr const char* kPrompt = "#8b5cf6";
inline constexpr const char* kDecode = "#2f6fdb";

// Fusion style, a light palette and the style sheet for cards, titles and the sidebar.
void apply(QApplication& app);

}  // namespace tandem::ui::theme
