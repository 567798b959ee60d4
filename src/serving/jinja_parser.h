// Parses a chat template into the tree the renderer walks: the statements here (jinja_parser.cc), the expressions
// inside tags in jinja_expression_parser.h, both with jinja2's grammar. Everything the renderer lacks is refused
// here, by name, before any conversation is rendered: tags other than if/for/set/macro/break/continue/generation
// (raw is the lexer's), and the filters, tests and methods it does not implement.
//
// Pure functions; no state.
#pragma once

#include <string>

#include "serving/jinja_ast.h"

namespace deepspeed::serving::jinja {

// Lexes and parses `source`. Throws SyntaxError (jinja_lexer.h) with the offset into Template::source.
Template parse_template(const std::string& source, const std::string& source_name);

}  // namespace deepspeed::serving::jinja
