// Python's operators as jinja2 applies them to template values: arithmetic (+ - * / // % **), ~ concatenation,
// unary minus and plus, comparisons and `in`. A type Python refuses (str + int, 'a' < 1) throws RenderError with
// Python's message; an undefined operand throws its UndefinedError message, except for ~, == and != (jinja2's
// Undefined prints as "" and compares).
//
// Pure functions; thread-safe.
#pragma once

#include <string>

#include "serving/jinja_value.h"

namespace deepspeed::serving::jinja {

// `op`: + - * / // % ** ~
Value binary_op(const std::string& op, const Value& left, const Value& right);
// `op`: - +
Value unary_op(const std::string& op, const Value& operand);
// `op`: == != < <= > >= in notin
bool compare_values(const std::string& op, const Value& left, const Value& right);

}  // namespace deepspeed::serving::jinja
