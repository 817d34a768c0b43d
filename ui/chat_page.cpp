#include "ui/chat_page.h"

#include <QLabel>
#include <QPushButton>
#include <QVBoxLayout>

namespace tandem::ui {

ChatPage::ChatPage(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("chatPage"));
  setAttribute(Qt::WA_StyledBackground);
  auto* layout = new QVBoxLayout(this);
  layout->addStretch(2);
  auto* title = new QLabel(tr("No model loaded"), this);
  title->setObjectName(QStringLiteral("emptyTitle"));
  title->setAlignment(Qt::AlignCenter);
  auto* text = new QLabel(tr("Tandem runs mixture-of-experts models with your GPU and CPU working "
                             "together.\nNo model is set up on this computer yet, so there is "
                             "nobody to chat with."),
                          this);
  text->setObjectName(QStringLiteral("emptyText"));
  text->setAlignment(Qt::AlignCenter);
  text->setWordWrap(true);
  auto* button = new QPushButton(tr("See what this computer can run"), this);
  button->setObjectName(QStringLiteral("primary"));
  connect(button, &QPushButton::clicked, this, &ChatPage::showSystemRequested);
  layout->addWidget(title);
  layout->addSpacing(6);
  layout->addWidget(text);
  layout->addSpacing(14);
  layout->addWidget(button, 0, Qt::AlignHCenter);
  layout->addStretch(3);
}

}  // namespace tandem::ui
