#include "engine/text/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <stdexcept>

namespace tandem::text {

namespace {

std::string normalize(std::string_view text, NormalForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNfc:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalForm::kNfd:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalForm::kNfkc:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalForm::kNfkd:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* result = nullptr;
  // An explicit length (no UTF8PROC_NULLTERM) keeps embedded NUL bytes.
  const utf8proc_ssize_t length = utf8proc_map(
      reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
      static_cast<utf8proc_ssize_t>(text.size()), &result, static_cast<utf8proc_option_t>(options));
  if (length < 0) {
    throw std::invalid_argument(std::string("Unicode normalization failed: ") +
                                utf8proc_errmsg(length));
  }
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(result, &std::free);
  return std::string(reinterpret_cast<const char*>(result), static_cast<std::size_t>(length));
}

}  // namespace

Normalizer::Normalizer(const std::vector<NormalForm>& forms) {
  for (NormalForm form : forms) add_normal_form(form);
}

void Normalizer::add_normal_form(NormalForm form) {
  steps_.push_back({Step::Kind::kNormalForm, form, {}, {}});
}

void Normalizer::add_prepend(std::string prefix) {
  steps_.push_back({Step::Kind::kPrepend, NormalForm::kNfc, {}, std::move(prefix)});
}

void Normalizer::add_replace(std::string from, std::string to) {
  steps_.push_back({Step::Kind::kReplace, NormalForm::kNfc, std::move(from), std::move(to)});
}

std::string Normalizer::apply(std::string_view text) const {
  std::string current(text);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::kNormalForm:
        current = normalize(current, step.form);
        break;
      case Step::Kind::kPrepend:
        if (!current.empty()) current.insert(0, step.to);
        break;
      case Step::Kind::kReplace: {
        if (step.from.empty()) break;
        std::string replaced;
        std::size_t at = 0;
        for (std::size_t found; (found = current.find(step.from, at)) != std::string::npos;
             at = found + step.from.size()) {
          replaced.append(current, at, found - at);
          replaced += step.to;
        }
        replaced.append(current, at, std::string::npos);
        current = std::move(replaced);
        break;
      }
    }
  }
  return current;
}

}  // namespace tandem::text
