#include "ui/theme.h"

#include <QApplication>
#include <QPalette>
#include <QStyleFactory>

namespace tandem::ui::theme {

void apply(QApplication& app) {
  app.setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
  QPalette p;
  p.setColor(QPalette::Window, QColor("#f4f6f9"));
  p.setColor(QPalette::Base, Qt::white);
  p.setColor(QPalette::AlternateBase, QColor("#f0f2f5"));
  p.setColor(QPalette::Text, QColor("#1d2430"));
  p.setColor(QPalette::WindowText, QColor("#1d2430"));
  p.setColor(QPalette::Button, QColor("#ffffff"));
  p.setColor(QPalette::ButtonText, QColor("#1d2430"));
  p.setColor(QPalette::Highlight, QColor(kAccent));
  p.setColor(QPalette::HighlightedText, Qt::white);
  p.setColor(QPalette::ToolTipBase, QColor("#1d2430"));
  p.setColor(QPalette::ToolTipText, Qt::white);
  p.setColor(QPalette::PlaceholderText, QColor(kMutedText));
  app.setPalette(p);
  app.setStyleSheet(QStringLiteral(R"(
    QFrame#card { background: #ffffff; border: 1px solid #dde2e8; border-radius: 8px; }
    QLabel#cardTitle { font-weight: 600; font-size: 11pt; color: #1d2430; }
    QLabel#pageTitle { font-size: 17pt; font-weight: 600; }
    QLabel#pageSubtitle { color: #5f6b7a; }
    QWidget#systemContent, QWidget#chatPage, QWidget#downloadsPage { background: #f4f6f9; }
    QListWidget#navigation { background: #e9edf2; border: none; border-right: 1px solid #dde2e8;
                             padding-top: 8px; font-size: 10.5pt; }
    QListWidget#navigation::item { padding: 9px 12px; margin: 2px 6px; border-radius: 6px; color: #1d2430; }
    QListWidget#navigation::item:selected { background: #ffffff; color: #2f6fdb; }
    QLabel#emptyTitle { font-size: 15pt; font-weight: 600; }
    QLabel#emptyText { color: #5f6b7a; font-size: 10.5pt; }
    QStatusBar { background: #e9edf2; border-top: 1px solid #dde2e8; }
    QStatusBar QLabel { color: #3b4554; padding: 0 8px; }
    QDockWidget::title { background: #e9edf2; padding: 6px; font-weight: 600; }
    QPushButton { padding: 5px 14px; border: 1px solid #c9d0d9; border-radius: 6px; background: #ffffff; }
    QPushButton:hover { border-color: #2f6fdb; }
    QPushButton#primary { background: #2f6fdb; color: white; border-color: #2f6fdb; }
    QPushButton:disabled { color: #9aa3ae; background: #f1f3f6; border-color: #dde2e8; }
    QPushButton#primary:disabled { color: #eef2f8; background: #a9bfe6; border-color: #a9bfe6; }
  )"));
}

}  // namespace tandem::ui::theme
