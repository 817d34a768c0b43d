// Conformance of the chat-template renderer with Python's jinja2: every template under
// tests/data/chat-templates/templates renders every recorded conversation byte for byte
// as tests/tools/gen_chat_template_cases.py recorded it, or raises where jinja2 raised.
#include <QtTest>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/template/chat_template.h"

using nlohmann::ordered_json;

namespace {

const std::filesystem::path kDataDir =
    std::filesystem::path(TANDEM_TEST_DATA_DIR) / "chat-templates";

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The instant gen_chat_template_cases.py fixes for strftime_now: 2026-01-15 09:30:00.
std::tm fixed_now() {
  std::tm t{};
  t.tm_year = 2026 - 1900;
  t.tm_mon = 0;
  t.tm_mday = 15;
  t.tm_hour = 9;
  t.tm_min = 30;
  t.tm_wday = 4;  // Thursday
  t.tm_yday = 14;
  return t;
}

}  // namespace

class TestChatTemplateConformance : public QObject {
  Q_OBJECT

 private slots:
  void matchesJinja2_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<QString>("caseName");
    const auto expected_dir = kDataDir / "expected";
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(expected_dir))
      files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    QVERIFY2(files.size() == 14, "expected recordings for the 14 templates");
    for (const auto& file : files) {
      const ordered_json expected = ordered_json::parse(read_text(file));
      for (auto it = expected["cases"].begin(); it != expected["cases"].end(); ++it) {
        const QString model = QString::fromStdString(file.stem().string());
        const QString name = QString::fromStdString(it.key());
        QTest::newRow(qPrintable(model + ":" + name)) << model << name;
      }
    }
  }

  void matchesJinja2() {
    QFETCH(QString, model);
    QFETCH(QString, caseName);
    const ordered_json expected =
        ordered_json::parse(read_text(kDataDir / "expected" / (model.toStdString() + ".json")));
    const ordered_json conversations =
        ordered_json::parse(read_text(kDataDir / "conversations.json"));
    const std::string case_name = caseName.toStdString();
    const std::string conversation_name = case_name.substr(0, case_name.find('/'));
    const ordered_json& conversation = conversations.at(conversation_name);
    const ordered_json& want = expected["cases"].at(case_name);

    tandem::ChatTemplate chat(
        read_text(kDataDir / "templates" / expected["template"].get<std::string>()));
    chat.set_clock(fixed_now);
    tandem::ChatTemplateInputs inputs;
    inputs.messages = conversation.at("messages");
    inputs.tools = conversation.contains("tools") ? conversation["tools"] : ordered_json();
    inputs.add_generation_prompt = case_name.ends_with("/gen");
    inputs.extra_variables = expected["variables"];
    if (conversation.contains("variables"))
      for (auto it = conversation["variables"].begin(); it != conversation["variables"].end(); ++it)
        inputs.extra_variables[it.key()] = it.value();

    if (want.contains("raises")) {
      const std::string reason = want["raises"].get<std::string>();
      try {
        const std::string output = chat.render(inputs);
        QFAIL(qPrintable("jinja2 raised \"" + QString::fromStdString(reason) +
                         "\" but we rendered:\n" + QString::fromStdString(output)));
      } catch (const tandem::jinja::TemplateError& error) {
        // Same failure as jinja2: the exception class maps to the error kind, and the
        // message is jinja2's own (raise_exception's text for RuntimeError).
        const size_t colon = reason.find(": ");
        const std::string python_class = reason.substr(0, colon);
        const std::string python_message = reason.substr(colon + 2);
        const std::map<std::string, tandem::jinja::ErrorKind> kinds = {
            {"RuntimeError", tandem::jinja::ErrorKind::Raised},
            {"UndefinedError", tandem::jinja::ErrorKind::Undefined},
            {"TypeError", tandem::jinja::ErrorKind::Type},
        };
        QVERIFY2(kinds.count(python_class),
                 qPrintable("unexpected jinja2 exception " + QString::fromStdString(reason)));
        QCOMPARE(error.kind(), kinds.at(python_class));
        QCOMPARE(QString::fromStdString(error.message()), QString::fromStdString(python_message));
      }
      return;
    }
    std::string output;
    try {
      output = chat.render(inputs);
    } catch (const tandem::jinja::TemplateError& error) {
      QFAIL(error.what());
    }
    QCOMPARE(QString::fromStdString(output),
             QString::fromStdString(want["output"].get<std::string>()));
  }
};

QTEST_APPLESS_MAIN(TestChatTemplateConformance)
#include "tst_chat_template_conformance.moc"
