// Walks a parsed chat template with one conversation's variables and returns the text it prints, with jinja2's
// scoping (a for loop's body and a macro's body assign into their own scope; namespace() objects carry values
// out), loop variables, macros, break and continue.
//
// Thread contract: render_template only reads the Template; concurrent renders of one template are safe.
#pragma once

#include <string>

#include "serving/jinja_ast.h"

namespace deepspeed::serving::jinja {

// Errors: RaisedError (the template's raise_exception, message as given), RenderError and UnsupportedError with
// the message opened by "line:column: " of the failing expression.
std::string render_template(const Template& tmpl, const Map& variables);

}  // namespace deepspeed::serving::jinja
