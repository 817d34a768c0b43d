#include "engine/template/jinja/template.h"

#include "engine/template/jinja/arguments.h"
#include "engine/template/jinja/json.h"
#include "engine/template/jinja/parser.h"

namespace tandem::jinja {
namespace {

Value make_range(const SandboxLimits& limits) {
  return Value::function("range", [max = limits.max_range_length](const CallArgs& args) {
    if (!args.keyword.empty()) throw ValueError("range() takes no keyword arguments");
    std::vector<int64_t> bounds;
    for (const Value& v : args.positional) {
      if (!v.is_int() && !v.is_bool())
        throw ValueError("range() needs integers, not " + v.type_name());
      bounds.push_back(v.as_integer());
    }
    int64_t start = 0, stop = 0, step = 1;
    if (bounds.size() == 1)
      stop = bounds[0];
    else if (bounds.size() == 2 || bounds.size() == 3) {
      start = bounds[0];
      stop = bounds[1];
      if (bounds.size() == 3) step = bounds[2];
    } else {
      throw ValueError("range expected 1 to 3 arguments, got " + std::to_string(bounds.size()));
    }
    if (step == 0) throw ValueError("range() arg 3 must not be zero");
    const int64_t count = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                                   : (start > stop ? (start - stop - step - 1) / -step : 0);
    if (count > max)
      throw ValueError("range too big: " + std::to_string(count) + " items, the sandbox allows " +
                           std::to_string(max),
                       ErrorKind::Limit);
    std::vector<Value> items;
    for (int64_t i = 0; i < count; ++i) items.emplace_back(start + i * step);
    return Value::list(std::move(items));
  });
}

Value make_dict_function(DictKind kind, const char* name) {
  return Value::function(name, [kind, name](const CallArgs& args) {
    Value result = Value::dict(kind);
    if (args.positional.size() > 1)
      throw ValueError(std::string(name) + "() takes at most one positional argument");
    if (!args.positional.empty()) {
      const Value& init = args.positional[0];
      if (!init.is_mapping())
        throw ValueError(std::string(name) + "() positional argument must be a dict");
      for (const auto& [key, value] : init.as_dict().entries()) result.as_dict().set(key, value);
    }
    for (const auto& [key, value] : args.keyword) result.as_dict().set(key, value);
    return result;
  });
}

}  // namespace

Template::Template(std::string_view source, TemplateOptions options) : options_(options) {
  tree_ = parse_template(source, LexerOptions{options.trim_blocks, options.lstrip_blocks},
                         options.limits.max_nesting_depth);
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const Value& variables) const {
  Dict globals;
  globals.set("range", make_range(options_.limits));
  globals.set("dict", make_dict_function(DictKind::Plain, "dict"));
  globals.set("namespace", make_dict_function(DictKind::Namespace, "namespace"));
  if (!variables.is_undefined()) {
    if (!variables.is_mapping()) throw std::invalid_argument("template variables must be a dict");
    for (const auto& [key, value] : variables.as_dict().entries()) globals.set(key, value);
  }
  Interpreter interpreter(options_.limits, globals);
  return interpreter.render(*tree_);
}

std::string Template::render(const nlohmann::ordered_json& variables) const {
  return render(variables.is_null() ? Value() : value_from_json(variables));
}

}  // namespace tandem::jinja
