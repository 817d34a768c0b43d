// The central chat area. Until a model is loaded it explains what to do next.
#pragma once

#include <QWidget>

class QLabel;
class QPushButton;

namespace tandem::ui {

class ChatPage : public QWidget {
  Q_OBJECT
 public:
  explicit ChatPage(QWidget* parent = nullptr);

 signals:
  void showSystemRequested();
};

}  // namespace tandem::ui
