#include "engine/template/jinja/arguments.h"

namespace tandem::jinja {

std::vector<Value> bind_arguments(const std::string& function, const CallArgs& args,
                                  const std::vector<Parameter>& params) {
  if (args.positional.size() > params.size())
    throw ValueError(function + "() takes at most " + std::to_string(params.size()) +
                     " arguments (" + std::to_string(args.positional.size()) + " given)");
  std::vector<std::optional<Value>> bound(params.size());
  for (size_t i = 0; i < args.positional.size(); ++i) bound[i] = args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    size_t i = 0;
    while (i < params.size() && params[i].name != key) ++i;
    if (i == params.size())
      throw ValueError(function + "() got an unexpected keyword argument '" + key + "'");
    if (bound[i]) throw ValueError(function + "() got multiple values for argument '" + key + "'");
    bound[i] = value;
  }
  std::vector<Value> out;
  out.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    if (bound[i])
      out.push_back(*bound[i]);
    else if (params[i].default_value)
      out.push_back(*params[i].default_value);
    else
      throw ValueError(function + "() missing required argument '" + params[i].name + "'");
  }
  return out;
}

}  // namespace tandem::jinja
