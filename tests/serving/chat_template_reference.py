"""What transformers renders for real chat templates: the reference of tests/serving/chat_template_test.cc.

For each template under tests/serving/chat_templates/ (copies of the models' own templates, plus
jinja_features.jinja, which exercises the Jinja2 constructs the real ones use more rarely), renders several
conversations with transformers' own code path (transformers.utils.chat_template_utils.render_jinja_template: jinja2's
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, transformers' tojson, raise_exception and strftime_now),
passing the special tokens as apply_chat_template does. A conversation the template refuses records the
TemplateError's message instead of a text.

Also writes model folders for ChatTemplate::from_model_dir, and what tokenizer.apply_chat_template renders for them:
  model_jinja/   saved by save_pretrained (the template in chat_template.jinja, special tokens in the config)
  model_legacy/  tokenizer_config.json holding the templates as a list of {name, template} (the "default" one is
                 Qwen2.5's) and bos_token as an AddedToken object
  model_none/    no template at all

Writes OUT_DIR/cases.json. Usage: chat_template_reference.py OUT_DIR TEMPLATE_DIR TOKENIZER_DIR
"""

import json
import os
import shutil
import sys
from datetime import datetime

import jinja2
from transformers import AutoTokenizer
from transformers.utils.chat_template_utils import render_jinja_template

LLAMA3 = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
SPECIAL_TOKENS = {
    "meta-llama-Llama-3.1-8B-Instruct.jinja": LLAMA3,
    "meta-llama-Llama-3.2-3B-Instruct.jinja": LLAMA3,
    "mistralai-Mistral-7B-Instruct-v0.3.jinja": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "Qwen-Qwen2.5-7B-Instruct.jinja": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "Qwen-Qwen3-0.6B.jinja": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "microsoft-Phi-3.5-mini-instruct.jinja": {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>",
                                              "pad_token": "<|endoftext|>"},
    "google-gemma-2-2b-it.jinja": {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>",
                                   "pad_token": "<pad>"},
    "jinja_features.jinja": {"bos_token": "<s>", "eos_token": "</s>"},
}

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
SYS_USER = [SYSTEM, {"role": "user", "content": "Hello!"}]
MULTI_TURN = [SYSTEM, {"role": "user", "content": "What is 2+2?"},
              {"role": "assistant", "content": "2+2 equals 4."}, {"role": "user", "content": "And 3+3?"}]
NO_SYSTEM = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"},
             {"role": "user", "content": "Thanks"}]
# Quotes, backslashes, control characters, non-ASCII and padding: what trim, tojson and repr must treat as Python.
AWKWARD = [{"role": "user", "content": "  Quotes ' \" and a backslash \\, a tab\t, Zürich, 中文, 😀  \n"},
           {"role": "assistant", "content": "\n  Sure: <b>bold</b> & {braces} {{ not jinja }}  "},
           {"role": "user", "content": "x"}]
USER_USER = [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city, e.g. Zürich"},
        "days": {"type": "integer", "minimum": 1}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
ARGS = {"city": "Zürich", "days": 3, "threshold": 0.5, "flags": [True, None], "nested": {"b": 1, "a": 2.0}}


def tool_conversation(tool_role="tool", call_id="abc123XYZ", content=None):
    return [SYSTEM, {"role": "user", "content": "Weather in Zürich?"},
            {"role": "assistant", "content": content, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": ARGS}}]},
            {"role": tool_role, "tool_call_id": call_id, "content": "{\"temp\": 21.5}"},
            {"role": "assistant", "content": "It is 21.5 °C."}, {"role": "user", "content": "And tomorrow?"}]


COMMON = {"sys_user": SYS_USER, "multi_turn": MULTI_TURN, "no_system": NO_SYSTEM, "awkward": AWKWARD}


def template_cases(name):
    """(case name, messages, extra template variables) for one template."""
    cases = [(k, v, {}) for k, v in COMMON.items()]
    if name.startswith("meta-llama-Llama-3.1"):
        cases += [("tools", tool_conversation("ipython")[:4], {"tools": [WEATHER_TOOL]}),
                  ("tools_in_system", SYS_USER, {"tools": [WEATHER_TOOL], "tools_in_user_message": False}),
                  ("builtin_tools", [SYSTEM, {"role": "user", "content": "Search it"},
                                     {"role": "assistant", "tool_calls": [{"function": {
                                         "name": "brave_search", "arguments": {"query": "weather", "n": "3"}}}]}],
                   {"builtin_tools": ["brave_search", "wolfram_alpha", "code_interpreter"]}),
                  ("tool_result_mapping", [{"role": "user", "content": "q"}, {"role": "tool", "content": {"a": [1]}}],
                   {}),
                  # A list content goes through trim as Python's str() of the list: its repr.
                  ("list_content", [{"role": "user", "content": [{"type": "text", "text": "it's \"quoted\"\n"}]}], {}),
                  ("two_tool_calls", [{"role": "assistant", "tool_calls": [{}, {}]}], {}),
                  ("date_string", SYS_USER, {"date_string": "01 Jan 2030"})]
    if name.startswith("meta-llama-Llama-3.2"):
        cases += [("tools", tool_conversation("tool")[:4], {"tools": [WEATHER_TOOL], "date_string": "26 Jul 2024"}),
                  ("date_string", SYS_USER, {"date_string": "01 Jan 2030"})]
    if name.startswith("mistralai"):
        cases += [("tools", tool_conversation(), {"tools": [WEATHER_TOOL]}),
                  ("not_alternating", USER_USER, {}),
                  ("bad_tool_id", tool_conversation(call_id="short"), {"tools": [WEATHER_TOOL]})]
    if name.startswith("Qwen"):
        two_results = tool_conversation()[:4] + [{"role": "tool", "content": "second"}]
        cases += [("tools", tool_conversation(), {"tools": [WEATHER_TOOL]}),
                  ("two_tool_results", two_results, {"tools": [WEATHER_TOOL]})]
    if name.startswith("Qwen-Qwen3"):
        string_args = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "f", "arguments": "{\"x\": 1}"}}]}]
        cases += [("thinking", MULTI_TURN + [{"role": "assistant", "content": "<think>\nLet me add.\n</think>\n\n6"}],
                   {}),
                  ("reasoning_content", NO_SYSTEM + [{"role": "assistant", "content": "Sure",
                                                      "reasoning_content": "Easy."}], {}),
                  ("no_thinking", SYS_USER, {"enable_thinking": False}),
                  ("string_arguments", string_args, {}),
                  ("tools_empty_content", tool_conversation(content=""), {"tools": [WEATHER_TOOL]})]
    if name.startswith("google-gemma"):
        cases += [("not_alternating", USER_USER, {})]
    if name == "jinja_features.jinja":
        cases += [("features_extra", MULTI_TURN, {"numbers": [3, 1.5, -2, 1e16, 1.5e-05, 0.1], "flag": True,
                                                  "nothing": None})]
    return cases


def render(template, messages, add_generation_prompt, variables):
    try:
        text = render_jinja_template(conversations=[messages], chat_template=template,
                                     add_generation_prompt=add_generation_prompt, **variables)[0][0]
        return {"expected": text}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e)}
    except (TypeError, ValueError) as e:  # the template failing on the conversation (Qwen3 on a None content)
        return {"error": str(e)}


def model_folders(out_dir, template_dir, tokenizer_dir):
    """The folders from_model_dir reads, each with what apply_chat_template renders from it."""
    with open(os.path.join(template_dir, "meta-llama-Llama-3.1-8B-Instruct.jinja"), encoding="utf-8") as f:
        llama = f.read()
    with open(os.path.join(template_dir, "Qwen-Qwen2.5-7B-Instruct.jinja"), encoding="utf-8") as f:
        qwen = f.read()
    cases = []
    for folder in ("model_jinja", "model_legacy", "model_none"):
        path = os.path.join(out_dir, folder)
        shutil.rmtree(path, ignore_errors=True)
        tok = AutoTokenizer.from_pretrained(tokenizer_dir)
        tok.bos_token = "<|begin_of_text|>"
        if folder != "model_none":
            tok.chat_template = llama
        tok.save_pretrained(path)
        if folder == "model_legacy":
            # The older layout: the template list in tokenizer_config.json, tokens as AddedToken objects.
            os.remove(os.path.join(path, "chat_template.jinja"))
            with open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8") as f:
                config = json.load(f)
            config["chat_template"] = [{"name": "tool_use", "template": llama}, {"name": "default", "template": qwen}]
            config["bos_token"] = {"__type": "AddedToken", "content": "<|begin_of_text|>", "lstrip": False,
                                   "normalized": False, "rstrip": False, "single_word": False, "special": True}
            with open(os.path.join(path, "tokenizer_config.json"), "w", encoding="utf-8") as f:
                json.dump(config, f, indent=2, ensure_ascii=False)
        if folder == "model_none":
            continue
        tok = AutoTokenizer.from_pretrained(path)
        for agp in (True, False):
            text = tok.apply_chat_template(MULTI_TURN, tokenize=False, add_generation_prompt=agp)
            cases.append({"folder": folder, "messages": MULTI_TURN, "add_generation_prompt": agp, "expected": text})
    return cases


def main():
    out_dir, template_dir, tokenizer_dir = sys.argv[1:4]
    os.makedirs(out_dir, exist_ok=True)
    cases = []
    for name in sorted(os.listdir(template_dir)):
        with open(os.path.join(template_dir, name), encoding="utf-8", newline="") as f:
            template = f.read()
        tokens = SPECIAL_TOKENS[name]
        for case, messages, extra in template_cases(name):
            for agp in (True, False):
                entry = {"template": name, "case": case, "messages": messages, "add_generation_prompt": agp,
                         "special_tokens": tokens, "extra": extra}
                entry.update(render(template, messages, agp, {**tokens, **extra}))
                cases.append(entry)
    result = {"today": datetime.now().strftime("%d %b %Y"), "cases": cases,
              "folders": model_folders(out_dir, template_dir, tokenizer_dir)}
    with open(os.path.join(out_dir, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
    print(f"{len(cases)} template cases ({sum('error' in c for c in cases)} refused), "
          f"{len(result['folders'])} folder cases")


if __name__ == "__main__":
    main()
