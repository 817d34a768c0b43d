#include "ui/code_highlighter.h"

#include <QColor>
#include <QStringList>

namespace tandem::ui {
namespace {

QTextCharFormat char_format(const char* color, bool bold = false, bool italic = false) {
  QTextCharFormat f;
  f.setForeground(QColor(QLatin1String(color)));
  if (bold) f.setFontWeight(QFont::DemiBold);
  f.setFontItalic(italic);
  return f;
}

// Keywords by language family, and how the family comments a line.
struct Family {
  QStringList names;
  QString keywords;
  QString line_comment;  // a regex from the comment's start to the line's end
};

const QVector<Family>& families() {
  static const QVector<Family> all = {
      {{"python", "py", "python3"},
       "and as assert async await break class continue def del elif else except False finally "
       "for from global if import in is lambda None nonlocal not or pass raise return True try "
       "while with yield self print",
       "#[^\n]*"},
      {{"c", "cpp", "c++", "cc", "h", "hpp", "cxx", "cuda", "cu"},
       "auto bool break case catch char class const constexpr continue default delete do double "
       "else enum explicit extern false float for friend if inline int long namespace new "
       "nullptr operator private protected public return short signed sizeof static struct "
       "switch template this throw true try typedef typename union unsigned using virtual void "
       "volatile while std include define",
       "//[^\n]*"},
      {{"rust", "rs"},
       "as async await break const continue crate else enum extern false fn for if impl in let "
       "loop match mod move mut pub ref return self Self static struct super trait true type "
       "unsafe use where while Some None Ok Err",
       "//[^\n]*"},
      {{"go", "golang"},
       "break case chan const continue default defer else fallthrough for func go goto if "
       "import interface map package range return select struct switch type var nil true false",
       "//[^\n]*"},
      {{"javascript", "js", "typescript", "ts", "jsx", "tsx"},
       "async await break case catch class const continue debugger default delete do else "
       "export extends false finally for function if import in instanceof let new null return "
       "super switch this throw true try typeof undefined var void while with yield interface "
       "type",
       "//[^\n]*"},
      {{"java", "kotlin", "kt", "csharp", "cs"},
       "abstract boolean break byte case catch char class continue default do double else enum "
       "extends false final finally float for if implements import instanceof int interface "
       "long new null package private protected public return short static super switch this "
       "throw throws true try void volatile while val var fun",
       "//[^\n]*"},
      {{"bash", "sh", "shell", "zsh", "console"},
       "if then else elif fi for while do done case esac in function return export local echo "
       "cd sudo apt pip git",
       "#[^\n]*"},
      {{"json", "jsonc"}, "true false null", "//[^\n]*"},
  };
  return all;
}

}  // namespace

CodeHighlighter::CodeHighlighter(QTextDocument* document) : QSyntaxHighlighter(document) {
  setLanguage(QString());
}

void CodeHighlighter::setLanguage(const QString& language) {
  language_ = language.trimmed().toLower();
  rules_.clear();
  const Family* family = nullptr;
  for (const Family& f : families())
    if (f.names.contains(language_)) family = &f;
  rules_.push_back({QRegularExpression(QStringLiteral("\\b(0x[0-9a-fA-F]+|\\d+(\\.\\d+)?)\\b")),
                    char_format("#f78c6c")});
  if (family != nullptr) {
    const QString words = family->keywords.split(QLatin1Char(' ')).join(QLatin1Char('|'));
    rules_.push_back({QRegularExpression(QStringLiteral("\\b(%1)\\b").arg(words)),
                      char_format("#c792ea", true)});
  }
  rules_.push_back(
      {QRegularExpression(QStringLiteral("\"(\\\\.|[^\"\\\\])*\"|'(\\\\.|[^'\\\\])*'")),
       char_format("#c3e88d")});
  const QString comment = family != nullptr ? family->line_comment : QStringLiteral("(#|//)[^\n]*");
  rules_.push_back({QRegularExpression(comment), char_format("#8a93b3", false, true)});
  rehighlight();
}

void CodeHighlighter::highlightBlock(const QString& text) {
  for (const Rule& rule : rules_) {
    for (auto it = rule.pattern.globalMatch(text); it.hasNext();) {
      const QRegularExpressionMatch m = it.next();
      setFormat(static_cast<int>(m.capturedStart()), static_cast<int>(m.capturedLength()),
                rule.format);
    }
  }
}

}  // namespace tandem::ui
