// The Jinja interpreter on its own: expressions with Python's value semantics, filters,
// tests, methods, loops, macros, namespaces, whitespace control, errors that name line
// and column, and the sandbox limits. Every expected output in renders_data() was
// produced by Python's jinja2 configured as tests/tools/gen_chat_template_cases.py does.
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>
#include <nlohmann/json.hpp>

#include "engine/template/jinja/json.h"
#include "engine/template/jinja/template.h"

using namespace tandem::jinja;

namespace {

const char* const kVariables =
    "{\"msgs\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
    "\"content\": \"yo\", \"n\": 2}], \"d\": {\"b\": 1, \"a\": 2}, \"s\": \"Hello World\", "
    "\"n\": 7, \"f\": 2.5, \"xs\": [3, 1, 2], \"e\": [], \"t\": true, \"none\": null}";

std::string render(const std::string& source, TemplateOptions options = {}) {
  return Template(source, options).render(nlohmann::ordered_json::parse(kVariables));
}

}  // namespace

Q_DECLARE_METATYPE(tandem::jinja::ErrorKind)

class TestJinja : public QObject {
  Q_OBJECT

 private slots:
  void renders_data() {
    QTest::addColumn<QString>("source");
    QTest::addColumn<QString>("expected");
    QTest::newRow("int arithmetic")
        << QString::fromUtf8(
               "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }}")
        << QString::fromUtf8("3 -4 2 3.5 1024 7");
    QTest::newRow("float repr")
        << QString::fromUtf8(
               "{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e-5 }} {{ 3.0 }} {{ f * 2 }} {{ 1/3 }}")
        << QString::fromUtf8("0.30000000000000004 1e+16 1e-05 3.0 5.0 0.3333333333333333");
    QTest::newRow("python str of values")
        << QString::fromUtf8(
               "{{ true }} {{ none }} {{ [1, 'a', none, false] }} {{ {'k': 1, 'j': [2.0]} }} {{ "
               "(1,) }} {{ ('a', 'b') }}")
        << QString::fromUtf8(
               "True None [1, 'a', None, False] {'k': 1, 'j': [2.0]} (1,) ('a', 'b')");
    QTest::newRow("repr quotes")
        << QString::fromUtf8("{{ [\"it's\", 'say \"x\"', 'both \\' \"', 'tab\\t'] }}")
        << QString::fromUtf8("[\"it's\", 'say \"x\"', 'both \\' \"', 'tab\\t']");
    QTest::newRow("string escapes")
        << QString::fromUtf8("{{ 'a\\nb\\tc\\u00e9\\x41' }}|{{ \"q\\\"q\" }}|{{ 'keep\\d' }}")
        << QString::fromUtf8("a\nb\tcéA|q\"q|keep\\d");
    QTest::newRow("concat and tilde")
        << QString::fromUtf8(
               "{{ 'a' ~ 1 ~ none ~ true }} {{ 'x' + 'y' }} {{ [1] + [2] }} {{ 'ab' * 3 }}")
        << QString::fromUtf8("a1NoneTrue xy [1, 2] ababab");
    QTest::newRow("comparisons") << QString::fromUtf8(
                                        "{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 'b' >= "
                                        "'a' }} {{ true == 1 }} {{ [1, 2] == [1, 2] }}")
                                 << QString::fromUtf8("True True True True True True");
    QTest::newRow("in and not in")
        << QString::fromUtf8(
               "{{ 'ell' in s }} {{ 2 in xs }} {{ 'a' in d }} {{ 'z' not in d }} {{ 5 not in xs }}")
        << QString::fromUtf8("True True True True True");
    QTest::newRow("and or not") << QString::fromUtf8(
                                       "{{ none or 'default' }} {{ 'x' and 'y' }} {{ not e }} {{ 0 "
                                       "or [] }}|{{ not (1 and 0) }}")
                                << QString::fromUtf8("default y True []|True");
    QTest::newRow("inline if")
        << QString::fromUtf8(
               "{{ 'yes' if t else 'no' }} {{ 'yes' if not t else 'no' }} [{{ 'only' if false }}]")
        << QString::fromUtf8("yes no []");
    QTest::newRow("attribute and index") << QString::fromUtf8(
                                                "{{ msgs[0].role }} {{ msgs[-1]['content'] }} {{ "
                                                "d.a }} {{ d['b'] }} {{ msgs.0.content }}")
                                         << QString::fromUtf8("user yo 2 1 hi");
    QTest::newRow("slicing")
        << QString::fromUtf8(
               "{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ s[6:] }} {{ s[::-2] }} {{ s[-5:-1] }}")
        << QString::fromUtf8("[1, 2] [3, 1] [2, 1, 3] World drWolH Worl");
    QTest::newRow("unicode length and slice")
        << QString::fromUtf8("{{ 'zürich✓'|length }} {{ 'zürich✓'[1:3] }} {{ 'zürich✓'[-1] }}")
        << QString::fromUtf8("7 ür ✓");
    QTest::newRow("undefined renders empty")
        << QString::fromUtf8(
               "[{{ missing }}] [{{ d.missing }}] {{ missing is defined }} {{ d.missing is "
               "undefined }} {{ missing|length }}")
        << QString::fromUtf8("[] [] False True 0");
    QTest::newRow("undefined iterates empty")
        << QString::fromUtf8(
               "{% for x in missing %}x{% else %}empty{% endfor %} {{ missing|default('dflt') }} "
               "{{ ''|default('e', true) }}")
        << QString::fromUtf8("empty dflt e");
    QTest::newRow("tests")
        << QString::fromUtf8(
               "{{ s is string }} {{ d is mapping }} {{ xs is iterable }} {{ xs is sequence }} {{ "
               "n is number }} {{ t is boolean }} {{ none is none }} {{ n is odd }} {{ 4 is even "
               "}} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ t is true }} {{ t is "
               "false }} {{ d is not mapping }} {{ n is integer }} {{ f is float }}")
        << QString::fromUtf8(
               "True True True True True True True True True True False True False False True "
               "True");
    QTest::newRow("test equalto in select")
        << QString::fromUtf8(
               "{{ msgs|selectattr('role', 'equalto', 'user')|list|length }} {{ ['a', 'b', "
               "'a']|reject('equalto', 'a')|list }} {{ [1, 2, 3, 4]|select('odd')|list }} {{ "
               "msgs|rejectattr('n')|map(attribute='role')|list }}")
        << QString::fromUtf8("1 ['b'] [1, 3] ['user']");
    QTest::newRow("string filters")
        << QString::fromUtf8(
               "{{ '  pad  '|trim }}|{{ s|upper }} {{ s|lower }} {{ 'hello wORLD-x'|title }} {{ "
               "'hELLO'|capitalize }} {{ s|replace('o', '0') }} {{ s|replace('o', '0', 1) }} {{ "
               "s|wordcount }} {{ s|reverse }}")
        << QString::fromUtf8(
               "pad|HELLO WORLD hello world Hello World-X Hello Hell0 W0rld Hell0 World 2 dlroW "
               "olleH");
    QTest::newRow("string methods")
        << QString::fromUtf8(
               "{{ s.split(' ') }} {{ ' a  b '.split() }} {{ 'a,b,c'.rsplit(',', 1) }} {{ '  x "
               "'.strip() }}|{{ 'xxhixx'.strip('x') }} {{ '--a'.lstrip('-') }} {{ 'a\\n'.rstrip() "
               "}} {{ s.startswith('He') }} {{ s.endswith(('x', 'ld')) }} {{ s.find('World') }} {{ "
               "s.count('o') }} {{ '{} and {}'.format(1, 'b') }}")
        << QString::fromUtf8(
               "['Hello', 'World'] ['a', 'b'] ['a,b', 'c'] x|hi a a True True 6 2 1 and b");
    QTest::newRow("dict methods")
        << QString::fromUtf8(
               "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {{ d.keys()|list }} {{ "
               "d.values()|list }} {{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 5) }}")
        << QString::fromUtf8("b=1;a=2; ['b', 'a'] [1, 2] 2 None 5");
    QTest::newRow("tojson")
        << QString::fromUtf8(
               "{{ msgs|tojson }}|{{ {'u': 'ü\"\\n', 'f': 1.5, 'n': none, 't': [true]}|tojson }}")
        << QString::fromUtf8(
               "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": "
               "\"yo\", \"n\": 2}]|{\"u\": \"ü\\\"\\n\", \"f\": 1.5, \"n\": null, \"t\": [true]}");
    QTest::newRow("tojson options")
        << QString::fromUtf8(
               "{{ d|tojson(indent=2) }}|{{ d|tojson(sort_keys=true) }}|{{ "
               "d|tojson(separators=(',', ':')) }}|{{ 'é'|tojson(ensure_ascii=true) }}|{{ "
               "[]|tojson(indent=2) }}")
        << QString::fromUtf8(
               "{\n  \"b\": 1,\n  \"a\": 2\n}|{\"a\": 2, \"b\": "
               "1}|{\"b\":1,\"a\":2}|\"\\u00e9\"|[]");
    QTest::newRow("list filters")
        << QString::fromUtf8(
               "{{ xs|sort }} {{ xs|sort(reverse=true) }} {{ ['b', 'A', 'c']|sort }} {{ "
               "msgs|sort(attribute='role', reverse=true)|map(attribute='content')|join(',') }} {{ "
               "xs|first }} {{ xs|last }} {{ xs|min }} {{ xs|max }} {{ xs|sum }} {{ [1, 1, "
               "2]|unique|list }} {{ xs|length }} {{ xs|count }}")
        << QString::fromUtf8("[1, 2, 3] [3, 2, 1] ['A', 'b', 'c'] hi,yo 3 2 1 3 6 [1, 2] 3 3");
    QTest::newRow("join and map")
        << QString::fromUtf8(
               "{{ xs|join(', ') }} {{ xs|map('string')|join }} {{ "
               "msgs|map(attribute='role')|join('/') }} {{ [-1, 2]|map('abs')|list }}")
        << QString::fromUtf8("3, 1, 2 312 user/assistant [1, 2]");
    QTest::newRow("items and dictsort")
        << QString::fromUtf8(
               "{{ d|items|list }} {{ d|dictsort }} {{ d|dictsort(by='value') }} {{ d|list }}")
        << QString::fromUtf8(
               "[('b', 1), ('a', 2)] [('a', 2), ('b', 1)] [('b', 1), ('a', 2)] ['b', 'a']");
    QTest::newRow("numbers filters")
        << QString::fromUtf8(
               "{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(5) }} {{ 3|float }} {{ "
               "'2.5'|float }} {{ -3|abs }} {{ 2.5|round }} {{ 3.14159|round(2) }} {{ 2.1|round(0, "
               "'ceil') }} {{ 7|string ~ 'x' }}")
        << QString::fromUtf8("42 4 0 5 3.0 2.5 3 2.0 3.14 3.0 7x");
    QTest::newRow("indent and batch")
        << QString::fromUtf8(
               "{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ "
               "'a\\n\\nb'|indent('> ', blank=true) }}|{{ [1, 2, 3]|batch(2)|list }}")
        << QString::fromUtf8("a\n  b\n\n  c|  a\n  b|a\n> \n> b|[[1, 2], [3]]");
    QTest::newRow("escape and safe")
        << QString::fromUtf8("{{ '<a href=\"x\">&\\'</a>'|e }} {{ '<b>'|safe }} {{ '<i>'|escape }}")
        << QString::fromUtf8("&lt;a href=&#34;x&#34;&gt;&amp;&#39;&lt;/a&gt; <b> &lt;i&gt;");
    QTest::newRow("percent format")
        << QString::fromUtf8(
               "{{ '%s is %d years, %.2f%%' % ('Ann', 30, 1.5) }} {{ '%s-%s'|format('a', 'b') }}")
        << QString::fromUtf8("Ann is 30 years, 1.50% a-b");
    QTest::newRow("loop variables")
        << QString::fromUtf8(
               "{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex "
               "}}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ "
               "loop.previtem }}{{ loop.nextitem }};{% endfor %}")
        << QString::fromUtf8("1032TrueFalse3b;2121FalseFalse3ac;3210FalseTrue3b;");
    QTest::newRow("loop cycle")
        << QString::fromUtf8("{% for x in range(4) %}{{ loop.cycle('odd', 'even') }} {% endfor %}")
        << QString::fromUtf8("odd even odd even ");
    QTest::newRow("for if filter and else")
        << QString::fromUtf8(
               "{% for m in msgs if m.role == 'assistant' %}{{ m.content }}{{ loop.length }}{{ "
               "loop.last }}{% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor "
               "%}")
        << QString::fromUtf8("yo1True|empty");
    QTest::newRow("break and continue")
        << QString::fromUtf8(
               "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}{% "
               "break %}{% endif %}{{ x }}{% endfor %}")
        << QString::fromUtf8("0134");
    QTest::newRow("nested loops and unpacking")
        << QString::fromUtf8(
               "{% for a, b in [(1, 2), (3, 4)] %}{% for c in [a, b] %}{{ c }}{{ loop.index }}{% "
               "endfor %};{% endfor %}")
        << QString::fromUtf8("1122;3142;");
    QTest::newRow("scoping of set in loop")
        << QString::fromUtf8(
               "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x "
               "}}{% if true %}{% set y = 3 %}{% endif %}{{ y }}")
        << QString::fromUtf8("121213");
    QTest::newRow("namespace")
        << QString::fromUtf8(
               "{% set ns = namespace(found=false, count=0) %}{% for m in msgs %}{% if m.role == "
               "'user' %}{% set ns.found = true %}{% endif %}{% set ns.count = ns.count + 1 %}{% "
               "endfor %}{{ ns.found }} {{ ns.count }}")
        << QString::fromUtf8("True 2");
    QTest::newRow("block set and filter block")
        << QString::fromUtf8(
               "{% set block %}Hi {{ s }}{% endset %}[{{ block }}]{% set up | upper %}text{% "
               "endset %}{{ up }}{% filter upper %}shout {{ n }}{% endfilter %}")
        << QString::fromUtf8("[Hi Hello World]TEXTSHOUT 7");
    QTest::newRow("macros")
        << QString::fromUtf8(
               "{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ "
               "greet('Ann') }} {{ greet('Bob', punct='\?') }} {{ greet(name='Cy') }}")
        << QString::fromUtf8("Hello Ann! Hello Bob\? Hello Cy!");
    QTest::newRow("recursive macro")
        << QString::fromUtf8(
               "{% macro fact(k) %}{% if k <= 1 %}1{% else %}{{ k * fact(k - 1)|int }}{% endif "
               "%}{% endmacro %}{{ fact(5) }}")
        << QString::fromUtf8("120");
    QTest::newRow("macro varargs kwargs") << QString::fromUtf8(
                                                 "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs "
                                                 "}}{% endmacro %}{{ m(1, 2, 3, x=4) }}")
                                          << QString::fromUtf8("1(2, 3){'x': 4}");
    QTest::newRow("call block")
        << QString::fromUtf8(
               "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call "
               "wrap('b') %}bold {{ n }}{% endcall %}{% macro each(items) %}{% for i in items %}{{ "
               "caller(i) }}{% endfor %}{% endmacro %}{% call(v) each([1, 2]) %}[{{ v }}]{% "
               "endcall %}")
        << QString::fromUtf8("<b>bold 7</b>[1][2]");
    QTest::newRow("raw") << QString::fromUtf8("{% raw %}{{ not rendered }} {% if %}{% endraw %}!")
                         << QString::fromUtf8("{{ not rendered }} {% if %}!");
    QTest::newRow("comments") << QString::fromUtf8("a{# hidden #}b{#- trimmed -#}  c")
                              << QString::fromUtf8("abc");
    QTest::newRow("whitespace minus")
        << QString::fromUtf8("a  {{- ' b ' -}}  c\n  {%- if true -%}  d  {%- endif -%}  e")
        << QString::fromUtf8("a b cde");
    QTest::newRow("trim_blocks") << QString::fromUtf8("{% if true %}\nline\n{% endif %}\nafter")
                                 << QString::fromUtf8("line\nafter");
    QTest::newRow("lstrip_blocks")
        << QString::fromUtf8("x\n    {% if true %}\n    body\n    {% endif %}\ny")
        << QString::fromUtf8("x\n    body\ny");
    QTest::newRow("lstrip not after text")
        << QString::fromUtf8("x  {% if true %}y{% endif %}  {{ 'v' }}\n  {{ 'w' }}")
        << QString::fromUtf8("x  y  v\n  w");
    QTest::newRow("plus disables lstrip")
        << QString::fromUtf8("x\n    {%+ if true %}y{% endif %}") << QString::fromUtf8("x\n    y");
    QTest::newRow("plus disables trim")
        << QString::fromUtf8("{% if true +%}\ny{% endif %}") << QString::fromUtf8("\ny");
    QTest::newRow("trailing newline dropped")
        << QString::fromUtf8("line\n") << QString::fromUtf8("line");
    QTest::newRow("crlf normalised")
        << QString::fromUtf8("a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n")
        << QString::fromUtf8("a\nb\n");
    QTest::newRow("dict and list literals") << QString::fromUtf8(
                                                   "{{ {'a': [1, {'b': (2, 3)}]}['a'][1]['b'][1] "
                                                   "}} {{ [1, 2,] }} {{ {'x': 1,} }} {{ () }}")
                                            << QString::fromUtf8("3 [1, 2] {'x': 1} ()");
    QTest::newRow("adjacent strings")
        << QString::fromUtf8("{{ 'a' 'b' \"c\" }}") << QString::fromUtf8("abc");
    QTest::newRow("tuple output") << QString::fromUtf8("{{ 1, 2 }}") << QString::fromUtf8("(1, 2)");
    QTest::newRow("range and dict")
        << QString::fromUtf8(
               "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(3, 0, -1)|list }} {{ "
               "dict(a=1, b='x') }}")
        << QString::fromUtf8("[0, 1, 2] [1, 4, 7] [3, 2, 1] {'a': 1, 'b': 'x'}");
    QTest::newRow("method on dict attribute priority")
        << QString::fromUtf8("{{ {'items': 5}.items()|list }} {{ {'items': 5}['items'] }}")
        << QString::fromUtf8("[('items', 5)] 5");
    QTest::newRow("unary ops") << QString::fromUtf8(
                                      "{{ -n }} {{ -f }} {{ +n }} {{ -(-n) }} {{ -(xs|length) }}")
                               << QString::fromUtf8("-7 -2.5 7 7 -3");
    QTest::newRow("filter precedence")
        << QString::fromUtf8("{{ 1 + xs|length }} {{ 'a' ~ xs|join }} {{ not xs|length }}")
        << QString::fromUtf8("4 a312 False");
    QTest::newRow("percent width and precision")
        << QString::fromUtf8(
               "{{ '%05.1f|%x|%5s|%-4d|%.2s|%c' % (3.14159, 255, 'ab', 7, 'xyz', 65) }}")
        << QString::fromUtf8("003.1|ff|   ab|7   |xy|A");
    QTest::newRow("split remainder keeps whitespace")
        << QString::fromUtf8(
               "{{ '  a b  '.rsplit(None, 1) }} {{ 'a  b  c  '.split(None, 1) }} {{ ' a b "
               "'.split(None, 0) }} {{ 'a,b,,c'.split(',') }} {{ ''.split() }}")
        << QString::fromUtf8("['  a', 'b'] ['a', 'b  c  '] ['a b '] ['a', 'b', '', 'c'] []");
    QTest::newRow("round half even on binary value")
        << QString::fromUtf8(
               "{{ 2.675|round(2) }} {{ 0.5|round }} {{ 1.5|round }} {{ -2.5|round }} {{ 7|round "
               "}}")
        << QString::fromUtf8("2.67 0.0 2.0 -2.0 7");
    QTest::newRow("raw keeps newline after raw tag")
        << QString::fromUtf8("    {% raw %}\n  a\n    {% endraw %}\nb")
        << QString::fromUtf8("\n  a\nb");
    QTest::newRow("sameas") << QString::fromUtf8(
                                   "{{ 1 is sameas 1 }} {{ none is sameas none }} {{ xs is sameas "
                                   "xs }} {{ [] is sameas [] }}")
                            << QString::fromUtf8("True True True False");
    QTest::newRow("non-string dict keys")
        << QString::fromUtf8(
               "{% set b = {0: 0, 512: 128} %}{% for k, v in b|dictsort %}{{ k }}:{{ v }};{% "
               "endfor %} {{ b[512] }} {{ b }} {{ b|tojson }} {{ {1: 'a', true: 'b', 1.0: 'c'} }} "
               "{{ {(1, 2): 'x'}[(1, 2)] }} {{ 512 in b }}")
        << QString::fromUtf8(
               "0:0;512:128; 128 {0: 0, 512: 128} {\"0\": 0, \"512\": 128} {1: 'c'} x True");
    QTest::newRow("dict equality")
        << QString::fromUtf8(
               "{{ msgs[0] == {'content': 'hi', 'role': 'user'} }} {{ msgs[0] == msgs[1] }}")
        << QString::fromUtf8("True False");
    QTest::newRow("float and int parsing")
        << QString::fromUtf8(
               "{{ 'nan'|float }} {{ '-Infinity'|float }} {{ '1e3'|float }} {{ ' 2.5 '|float }} {{ "
               "'1_0.5'|float }} {{ '+3'|float }} {{ '1__0'|float }} {{ '.5'|float }} {{ "
               "'1e400'|float }} {{ '-2.9'|int }} {{ '1e3'|int }} {{ '  -12  '|int }} {{ 1.5e300 "
               "}} {{ 12345.678|round(-2) }} {{ 0.125|round(2) }}")
        << QString::fromUtf8(
               "nan -inf 1000.0 2.5 10.5 3.0 0.0 0.5 inf -2 1000 -12 1.5e+300 12300.0 0.12");
    QTest::newRow("printf floats")
        << QString::fromUtf8("{{ '%.3f %e %g %10.2f' % (3.14159, 12345.678, 0.0001, -2.5) }}")
        << QString::fromUtf8("3.142 1.234568e+04 0.0001      -2.50");
    QTest::newRow("string compare and truthiness")
        << QString::fromUtf8(
               "{{ '' or 'empty' }} {{ [] or 'nolist' }} {{ {} or 'nodict' }} {{ 0.0 or 'zero' }}")
        << QString::fromUtf8("empty nolist nodict zero");
  }

  void renders() {
    QFETCH(QString, source);
    QFETCH(QString, expected);
    try {
      QCOMPARE(QString::fromStdString(render(source.toStdString())), expected);
    } catch (const TemplateError& error) {
      QFAIL(error.what());
    }
  }

  void failsWithPosition_data() {
    QTest::addColumn<QString>("source");
    QTest::addColumn<ErrorKind>("kind");
    QTest::addColumn<int>("line");
    QTest::addColumn<int>("column");
    QTest::addColumn<QString>("message");
    QTest::newRow("empty if") << "a\n{% if %}" << ErrorKind::Syntax << 2 << 7 << "unexpected '%}'";
    QTest::newRow("stray endfor") << "{% for x in xs %}{% endfor %}\n  {% endfor %}"
                                  << ErrorKind::Syntax << 2 << 6 << "unknown tag 'endfor'";
    QTest::newRow("unclosed if") << "{% if t %}\nyes" << ErrorKind::Syntax << 2 << 4
                                 << "expected 'elif' or 'else' or 'endif'";
    QTest::newRow("unknown tag") << "x {% frobnicate %}" << ErrorKind::Syntax << 1 << 6
                                 << "unknown tag 'frobnicate'";
    QTest::newRow("incomplete expression")
        << "{{ 1 + }}" << ErrorKind::Syntax << 1 << 8 << "unexpected '}}'";
    QTest::newRow("unterminated string")
        << "\n\n  {{ 'abc }}" << ErrorKind::Syntax << 3 << 6 << "unterminated string";
    QTest::newRow("unterminated tag") << "{{ x " << ErrorKind::Syntax << 1 << 1 << "missing '}}'";
    QTest::newRow("break outside loop")
        << "{% break %}" << ErrorKind::Syntax << 1 << 4 << "'break' outside of a for loop";
    QTest::newRow("attribute of undefined")
        << "line\n  {{ x.y }}" << ErrorKind::Undefined << 2 << 6 << "'x' is undefined";
    QTest::newRow("arithmetic on undefined")
        << "{{ x + 1 }}" << ErrorKind::Undefined << 1 << 6 << "'x' is undefined";
    QTest::newRow("missing key then attribute") << "{{ d.zz.y }}" << ErrorKind::Undefined << 1 << 4
                                                << "'dict object' has no attribute 'zz'";
    QTest::newRow("int plus str") << "{{ 1 + 'a' }}" << ErrorKind::Type << 1 << 6
                                  << "unsupported operand type(s) for +: 'int' and 'str'";
    QTest::newRow("negated list") << "{{ -[1]|length }}" << ErrorKind::Type << 1 << 4
                                  << "bad operand type for unary -: 'list'";
    QTest::newRow("iterate int") << "{% for x in n %}{% endfor %}" << ErrorKind::Type << 1 << 13
                                 << "'int' object is not iterable";
    QTest::newRow("tojson undefined") << "{{ x|tojson }}" << ErrorKind::Type << 1 << 5
                                      << "Object of type Undefined is not JSON serializable";
    QTest::newRow("division by zero")
        << "{{ 1 / 0 }}" << ErrorKind::Type << 1 << 6 << "division by zero";
    QTest::newRow("unknown filter")
        << "{{ s|shout }}" << ErrorKind::Type << 1 << 5 << "no filter named 'shout'";
    QTest::newRow("unknown test") << "{{ s is loud }}" << ErrorKind::Type << 1 << 6
                                  << "no test named 'loud'";
    QTest::newRow("list append is refused")
        << "{{ xs.append(4) }}" << ErrorKind::Security << 1 << 4
        << "access to attribute 'append' of 'list' object is unsafe";
    QTest::newRow("dict update is refused")
        << "{{ d.update(a=1) }}" << ErrorKind::Security << 1 << 4
        << "access to attribute 'update' of 'dict' object is unsafe";
    QTest::newRow("set attribute of dict") << "{% set d.a = 1 %}" << ErrorKind::Type << 1 << 4
                                           << "cannot assign attribute on non-namespace object";
    QTest::newRow("macro given too many arguments")
        << "{% macro m(x) %}{{ x }}{% endmacro %}{{ m(1, 2) }}" << ErrorKind::Type << 1 << 41
        << "macro 'm' takes not more than 1 argument(s)";
    QTest::newRow("unhashable dict key")
        << "{{ {[1]: 2} }}" << ErrorKind::Type << 1 << 4 << "unhashable type: 'list'";
    QTest::newRow("range too big")
        << "{{ range(200000)|length }}" << ErrorKind::Limit << 1 << 4 << "range too big";
    // Python's integers do not overflow; 64-bit ones are refused past their range rather
    // than wrapped or clamped (found by fuzzing: 12 + a clamped literal was undefined).
    QTest::newRow("integer literal too large")
        << "{{ 12 + 99999999999999999999 }}" << ErrorKind::Syntax << 1 << 9
        << "the integer literal 99999999999999999999 is too large";
    QTest::newRow("+ overflows") << "{{ 9223372036854775807 + 1 }}" << ErrorKind::Limit << 1 << 24
                                 << "the integer result of + is too large";
    QTest::newRow("- overflows") << "{{ -9223372036854775807 - 2 }}" << ErrorKind::Limit << 1 << 25
                                 << "the integer result of - is too large";
    QTest::newRow("* overflows") << "{{ 3037000500 * 3037000500 }}" << ErrorKind::Limit << 1 << 15
                                 << "the integer result of * is too large";
    QTest::newRow("** overflows") << "{{ 2 ** 64 }}" << ErrorKind::Limit << 1 << 6
                                  << "the integer result of ** is too large";
    QTest::newRow("// overflows") << "{{ (-9223372036854775807 - 1) // -1 }}" << ErrorKind::Limit
                                  << 1 << 31 << "the integer result of // is too large";
    QTest::newRow("unary - overflows") << "{{ -(-9223372036854775807 - 1) }}" << ErrorKind::Limit
                                       << 1 << 4 << "the integer result of unary - is too large";
    QTest::newRow("abs overflows") << "{{ (-9223372036854775807 - 1)|abs }}" << ErrorKind::Limit
                                   << 1 << 30 << "the integer result of abs is too large";
    QTest::newRow("int of a huge string")
        << "{{ '99999999999999999999'|int }}" << ErrorKind::Limit << 1 << 26
        << "the integer 99999999999999999999 is too large";
  }

  // Integer arithmetic at the edges of 64 bits that does not overflow gives Python's answers;
  // a huge power of 1 takes no time.
  void integersAtTheirEdges() {
    QCOMPARE(QString::fromStdString(render("{{ 9223372036854775806 + 1 }}")),
             QString("9223372036854775807"));
    QCOMPARE(QString::fromStdString(render("{{ (-9223372036854775807 - 1) % -1 }}")), QString("0"));
    QCOMPARE(QString::fromStdString(render("{{ 1 ** 1000000000000000000 }}")), QString("1"));
    QCOMPARE(QString::fromStdString(render("{{ (-1) ** 1000000000000000001 }}")), QString("-1"));
    QCOMPARE(QString::fromStdString(render("{{ 0 ** 1000000000000000000 }}")), QString("0"));
    QCOMPARE(QString::fromStdString(render("{{ 3 ** 39 }}")), QString("4052555153018976267"));
    QCOMPARE(QString::fromStdString(render("{{ (-2) ** 63 }}")), QString("-9223372036854775808"));
  }

  void failsWithPosition() {
    QFETCH(QString, source);
    QFETCH(ErrorKind, kind);
    QFETCH(int, line);
    QFETCH(int, column);
    QFETCH(QString, message);
    try {
      const std::string output = render(source.toStdString());
      QFAIL(qPrintable("rendered instead of failing: " + QString::fromStdString(output)));
    } catch (const TemplateError& error) {
      QVERIFY2(QString::fromStdString(error.message()).contains(message), error.what());
      QCOMPARE(error.kind(), kind);
      QCOMPARE(error.line(), line);
      QCOMPARE(error.column(), column);
      QVERIFY(QString::fromUtf8(error.what())
                  .startsWith(QString("template line %1, column %2: ").arg(line).arg(column)));
    }
  }

  // Templates come from the internet: nothing in the language reaches a file, the network
  // or Python's internals. Each attempt fails to render (or renders nothing of the file).
  void theSandboxReachesNoFiles_data() {
    QTest::addColumn<QString>("source");
    QTest::newRow("include") << "{% include '@FILE@' %}";
    QTest::newRow("import") << "{% import '@FILE@' as secrets %}{{ secrets }}";
    QTest::newRow("from import") << "{% from '@FILE@' import x %}{{ x }}";
    QTest::newRow("extends") << "{% extends '@FILE@' %}";
    QTest::newRow("open") << "{{ open('@FILE@').read() }}";
    QTest::newRow("class walk") << "{{ ''.__class__.__mro__[1].__subclasses__() }}";
    QTest::newRow("globals") << "{{ cycler.__init__.__globals__.os.popen('cat @FILE@').read() }}";
    QTest::newRow("self") << "{{ self._TemplateReference__context }}";
    QTest::newRow("config") << "{{ config.items() }}{{ request }}{{ lipsum.__globals__ }}";
    QTest::newRow("attr filter") << "{{ ''|attr('__class__') }}";
    QTest::newRow("url") << "{{ urlopen('http://127.0.0.1:9/') }}";
  }
  void theSandboxReachesNoFiles() {
    QFETCH(QString, source);
    QTemporaryDir dir;
    const QString secret = dir.filePath("secret.txt");
    {
      QFile f(secret);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write("TOP-SECRET-MARKER");
    }
    const std::string program = source.replace(QStringLiteral("@FILE@"), secret).toStdString();
    try {
      const std::string out = render(program);
      QVERIFY2(out.find("TOP-SECRET-MARKER") == std::string::npos, out.c_str());
      QVERIFY2(out.find("class") == std::string::npos && out.find("<") == std::string::npos,
               out.c_str());
    } catch (const TemplateError&) {
      // refused: the expected answer
    }
  }

  void stopsRunawayLoops() {
    TemplateOptions options;
    options.limits.max_loop_iterations = 10000;
    try {
      render("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
             options);
      QFAIL("a million iterations ran under a limit of ten thousand");
    } catch (const TemplateError& error) {
      QCOMPARE(error.kind(), ErrorKind::Limit);
      QCOMPARE(error.line(), 1);
      QVERIFY(error.message().find("10000 iterations") != std::string::npos);
    }
    // Just under the limit is fine.
    QCOMPARE(
        QString::fromStdString(render(
            "{% for i in range(99) %}{% for j in range(99) %}{% endfor %}{% endfor %}ok", options)),
        QString("ok"));
  }

  void stopsHugeOutput() {
    TemplateOptions options;
    options.limits.max_output_bytes = 1000;
    QCOMPARE(render("{{ 'x' * 1000 }}", options).size(), size_t{1000});
    const char* const hostile[] = {
        "{{ 'x' * 1001 }}",
        "{% for i in range(100) %}0123456789ab{% endfor %}",
        "{% set ns = namespace(s='ab') %}{% for i in range(20) %}{% set ns.s = ns.s ~ ns.s %}{% "
        "endfor %}",
        "{{ 'a' * 100000000000 }}",
        "{{ range(600)|join(',') }}",
    };
    for (const char* source : hostile) {
      try {
        render(source, options);
        QFAIL(qPrintable(QString("no limit hit for ") + source));
      } catch (const TemplateError& error) {
        QCOMPARE(error.kind(), ErrorKind::Limit);
      }
    }
  }

  void stopsDeepRecursion() {
    TemplateOptions options;
    options.limits.max_call_depth = 50;
    try {
      render("{% macro down(k) %}{{ down(k + 1) }}{% endmacro %}{{ down(0) }}", options);
      QFAIL("infinite recursion was not stopped");
    } catch (const TemplateError& error) {
      QCOMPARE(error.kind(), ErrorKind::Limit);
      QVERIFY(error.message().find("nest deeper than the limit of 50") != std::string::npos);
    }
    QCOMPARE(QString::fromStdString(render("{% macro down(k) %}{% if k < 40 %}{{ down(k + 1) }}{% "
                                           "else %}{{ k }}{% endif %}{% endmacro %}{{ down(0) }}",
                                           options)),
             QString("40"));
  }

  void stopsDeepNesting() {
    TemplateOptions options;
    options.limits.max_nesting_depth = 64;
    const std::string deep = "{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}";
    try {
      render(deep, options);
      QFAIL("500 nested parentheses parsed under a nesting limit of 64");
    } catch (const TemplateError& error) {
      QCOMPARE(error.kind(), ErrorKind::Syntax);
      QVERIFY(error.message().find("nests deeper") != std::string::npos);
    }
  }

  void keepsJsonKeyOrder() {
    // Tool schemas print in the order their authors wrote them, as Python dicts do.
    const auto variables =
        nlohmann::ordered_json::parse("{\"tool\": {\"z\": 1, \"a\": {\"y\": 2, \"b\": 3}}}");
    QCOMPARE(QString::fromStdString(Template("{{ tool|tojson }} {{ tool }}").render(variables)),
             QString("{\"z\": 1, \"a\": {\"y\": 2, \"b\": 3}} {'z': 1, 'a': {'y': 2, 'b': 3}}"));
  }

  void rendersWithoutWhitespaceOptions() {
    TemplateOptions options;
    options.trim_blocks = false;
    options.lstrip_blocks = false;
    QCOMPARE(QString::fromStdString(render("x\n  {% if true %}\ny\n  {% endif %}\n", options)),
             QString("x\n  \ny\n  "));
  }

  void valueRoundTripsThroughJson() {
    const auto document =
        nlohmann::ordered_json::parse("{\"b\": [1, 2.5, \"x\", null, true], \"a\": {}}");
    QCOMPARE(value_to_json(value_from_json(document)).dump(), document.dump());
  }
};

QTEST_APPLESS_MAIN(TestJinja)
#include "tst_jinja.moc"
