// A menu entry and icon for Tandem run from its AppImage: offered at the first start from
// one, kept pointing at the image, removable from Preferences. Installed by a package
// manager, Tandem has the system's own entry and none of this applies.
#pragma once

#include <QString>

namespace tandem::ui::desktop_integration {

// The AppImage Tandem runs from (its runtime sets APPIMAGE); empty when it does not.
QString appimage_path();
// Where the entry and the icon go (XDG_DATA_HOME: applications/, icons/hicolor/).
QString entry_path();
QString icon_path();
bool installed();

// Writes the icon and the entry (Exec at `appimage`), each whole and then renamed into
// place; an empty string, or a sentence saying what failed.
QString install(const QString& appimage);
QString remove();

// Asked once: the first start from an AppImage offers the entry, whatever the answer.
bool asked();
void set_asked();

}  // namespace tandem::ui::desktop_integration
