// Colours for the code blocks of replies: keywords, strings, comments and numbers of the
// languages models write most (Python, C and C++, Rust, Go, JavaScript and TypeScript, Java,
// shell, JSON), chosen by the fence's language name; anything else gets strings, comments
// and numbers only. Made for the blocks' dark background.
#pragma once

#include <QRegularExpression>
#include <QSyntaxHighlighter>
#include <QTextCharFormat>
#include <QVector>

namespace tandem::ui {

class CodeHighlighter : public QSyntaxHighlighter {
 public:
  explicit CodeHighlighter(QTextDocument* document);
  // "python", "py", "cpp", "rust", ... (case does not matter); reapplies the colours.
  void setLanguage(const QString& language);
  QString language() const { return language_; }

 protected:
  void highlightBlock(const QString& text) override;

 private:
  struct Rule {
    QRegularExpression pattern;
    QTextCharFormat format;
  };
  QString language_;
  QVector<Rule> rules_;  // later rules win: comments and strings last
};

}  // namespace tandem::ui
