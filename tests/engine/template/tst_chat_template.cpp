// ChatTemplate: finding the template in a model folder, the globals Hugging Face adds
// (raise_exception, strftime_now with an injectable clock), and which variables the
// template sees.
#include <QTemporaryDir>
#include <QtTest>
#include <fstream>

#include "engine/template/chat_template.h"

using nlohmann::ordered_json;
using tandem::ChatTemplate;
using tandem::ChatTemplateInputs;
using tandem::jinja::ErrorKind;
using tandem::jinja::TemplateError;

namespace {

void write_file(const QTemporaryDir& dir, const char* name, const std::string& text) {
  std::ofstream out(std::filesystem::path(dir.path().toStdString()) / name, std::ios::binary);
  out << text;
}

std::filesystem::path folder(const QTemporaryDir& dir) {
  return dir.path().toStdString();
}

ChatTemplateInputs user_says(const std::string& text) {
  ChatTemplateInputs inputs;
  inputs.messages = ordered_json::array({{{"role", "user"}, {"content", text}}});
  return inputs;
}

}  // namespace

class TestChatTemplate : public QObject {
  Q_OBJECT

 private slots:
  void readsTemplateStringFromTokenizerConfig() {
    QTemporaryDir dir;
    write_file(dir, "tokenizer_config.json",
               ordered_json{{"chat_template",
                             "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"}}
                   .dump());
    const ChatTemplate chat = ChatTemplate::from_model_folder(folder(dir));
    QCOMPARE(QString::fromStdString(chat.render(user_says("hi"))), QString("<user>hi"));
  }

  void picksDefaultFromNamedTemplates() {
    QTemporaryDir dir;
    write_file(dir, "tokenizer_config.json",
               ordered_json{{"chat_template",
                             ordered_json::array({{{"name", "tool_use"}, {"template", "tools"}},
                                                  {{"name", "default"}, {"template", "plain"}}})}}
                   .dump());
    QCOMPARE(QString::fromStdString(ChatTemplate::read_source_from_model_folder(folder(dir))),
             QString("plain"));
  }

  void prefersChatTemplateJinjaFile() {
    QTemporaryDir dir;
    write_file(dir, "tokenizer_config.json", ordered_json{{"chat_template", "from config"}}.dump());
    write_file(dir, "chat_template.jinja", "from file\n");
    QCOMPARE(
        QString::fromStdString(ChatTemplate::from_model_folder(folder(dir)).render(user_says("x"))),
        QString("from file"));
  }

  void explainsMissingTemplate_data() {
    QTest::addColumn<QString>("config");
    QTest::addColumn<QString>("explanation");
    QTest::newRow("no files") << QString()
                              << "has neither chat_template.jinja nor tokenizer_config.json";
    QTest::newRow("no chat_template") << "{\"eos_token\": \"</s>\"}"
                                      << "defines no chat_template";
    QTest::newRow("no default") << "{\"chat_template\": [{\"name\": \"rag\", \"template\": \"x\"}]}"
                                << "lists chat templates (rag) but none named \"default\"";
    QTest::newRow("broken json") << "{\"chat_template\": "
                                 << "is not valid JSON";
  }

  void explainsMissingTemplate() {
    QFETCH(QString, config);
    QFETCH(QString, explanation);
    QTemporaryDir dir;
    if (!config.isNull()) write_file(dir, "tokenizer_config.json", config.toStdString());
    try {
      ChatTemplate::read_source_from_model_folder(folder(dir));
      QFAIL("a folder without a usable template was accepted");
    } catch (const std::runtime_error& error) {
      QVERIFY2(QString::fromUtf8(error.what()).contains(explanation), error.what());
    }
  }

  void rendersModelFolderWithItsSpecialTokens() {
    QTemporaryDir dir;
    write_file(
        dir, "tokenizer_config.json",
        ordered_json{{"chat_template",
                      "{{ bos_token }}|{{ eos_token }}|{{ unk_token }}|{{ pad_token is defined }}"},
                     {"bos_token", {{"content", "<s>"}, {"lstrip", false}}},
                     {"eos_token", "</s>"},
                     {"unk_token", nullptr}}
            .dump());
    QCOMPARE(
        QString::fromStdString(tandem::read_special_tokens_from_model_folder(folder(dir)).dump()),
        QString("{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}"));
    ChatTemplateInputs inputs = user_says("x");
    QCOMPARE(QString::fromStdString(tandem::render_model_chat_template(folder(dir), inputs)),
             QString("<s>|</s>||False"));
    inputs.extra_variables = {{"eos_token", "<|end|>"}};
    QCOMPARE(QString::fromStdString(tandem::render_model_chat_template(folder(dir), inputs)),
             QString("<s>|<|end|>||False"));
  }

  void strftimeNowUsesInjectedClock() {
    ChatTemplate chat("Today is {{ strftime_now('%d %B %Y, %A') }}.");
    chat.set_clock([] {
      std::tm t{};
      t.tm_year = 2024 - 1900;
      t.tm_mon = 6;
      t.tm_mday = 26;
      t.tm_wday = 5;
      return t;
    });
    QCOMPARE(QString::fromStdString(chat.render(user_says("x"))),
             QString("Today is 26 July 2024, Friday."));
    // A format that yields nothing is not an error (Python returns '').
    QCOMPARE(
        QString::fromStdString(ChatTemplate("[{{ strftime_now('') }}]").render(user_says("x"))),
        QString("[]"));
  }

  void raiseExceptionCarriesTemplateMessage() {
    const ChatTemplate chat(
        "{% if messages[0].role == 'user' %}\n  {{ raise_exception('Only system first!') }}{% "
        "endif %}");
    try {
      chat.render(user_says("x"));
      QFAIL("raise_exception did not raise");
    } catch (const TemplateError& error) {
      QCOMPARE(error.kind(), ErrorKind::Raised);
      QCOMPARE(QString::fromStdString(error.message()), QString("Only system first!"));
      QCOMPARE(error.line(), 2);
    }
  }

  void passesOnlyGivenVariables() {
    const ChatTemplate chat(
        "{{ tools is defined }} {{ bos_token is defined }} {{ add_generation_prompt }} {{ "
        "tools|length }}"
        "{{ bos_token }}{% if add_generation_prompt %}<assistant>{% endif %}");
    ChatTemplateInputs inputs = user_says("x");
    inputs.add_generation_prompt = false;
    QCOMPARE(QString::fromStdString(chat.render(inputs)), QString("False False False 0"));
    inputs.tools = ordered_json::array({{{"type", "function"}}});
    inputs.add_generation_prompt = true;
    inputs.extra_variables = {{"bos_token", "<s>"}};
    QCOMPARE(QString::fromStdString(chat.render(inputs)),
             QString("True True True 1<s><assistant>"));
  }

  void acceptsPlainJsonDocuments() {
    // Callers holding nlohmann::json (sorted keys) can pass it directly.
    const nlohmann::json messages = nlohmann::json::parse(R"([{"role": "user", "content": "hi"}])");
    const ChatTemplate chat("{% for m in messages %}{{ m.role }}:{{ m.content }}{% endfor %}");
    QCOMPARE(QString::fromStdString(chat.render(messages, nullptr, true, nlohmann::json::object())),
             QString("user:hi"));
  }

  void rejectsBadTemplateAtConstruction() {
    try {
      ChatTemplate chat("{% for m in messages %}\n{{ m.content }");
      QFAIL("a template with an unterminated expression was accepted");
    } catch (const TemplateError& error) {
      QCOMPARE(error.kind(), ErrorKind::Syntax);
      QCOMPARE(error.line(), 2);
    }
  }
};

QTEST_APPLESS_MAIN(TestChatTemplate)
#include "tst_chat_template.moc"
