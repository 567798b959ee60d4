"""The reference of the ds_serve tests (serve_openai_test.py): a tiny random Llama with the shipped byte-level
tokenizer (examples/tokenizer) and a chat template, saved by transformers, and what transformers' tokenizer,
apply_chat_template, greedy generate and decode give for the requests the tests send.

Writes OUT_DIR/model/ (config.json, model.safetensors, generation_config.json, tokenizer.json,
tokenizer_config.json with a chat_template), OUT_DIR/model_nochat/ (the same without the chat template) and
OUT_DIR/expected.json:
  completions: [{prompt, max_tokens, text, finish_reason, prompt_tokens, completion_tokens, prompt_ids}]
  chat:        [{messages, max_tokens, text, finish_reason, prompt_tokens, completion_tokens}]
  stop:        [{prompt, max_tokens, stop, text}]  (the text before the stop string's first appearance)
Each prompt is generated alone (no padding), greedy, stopping at <|end_of_text|>, decoded with skip_special_tokens.

Usage: serve_reference.py OUT_DIR TOKENIZER_DIR
"""

import json
import os
import shutil
import sys

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

CONTEXT = 256
CHAT_TEMPLATE = ("{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + '\\n' }}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}")
COMPLETIONS = [("The quick brown fox", 24), ("Hello, world! Once upon a time there was", 40),
               ("A", 7), ("Numbers: 1, 2, 3, 4,", 60), ("Caf\u00e9 cr\u00e8me, na\u00efve \u65e5\u672c", 30),
               ("Dear reader,", 120),
               # Long continuations (no end-of-text within 200 tokens): the streams the bad-input test runs beside.
               ("The license", 200), ("Streams keep going", 200), ("Copyright (C)", 200),
               ("GNU General Public License version 3", 200)]
CHATS = [([{"role": "user", "content": "Tell me about foxes."}], 32),
         ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"},
           {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Count to five."}], 48)]


def generate(model, tok, ids, max_tokens, eos):
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=max_tokens, do_sample=False, pad_token_id=eos)
    new = out[0, len(ids):].tolist()
    finish = "stop" if new and new[-1] == eos else "length"
    return {"text": tok.decode(new, skip_special_tokens=True), "finish_reason": finish,
            "prompt_tokens": len(ids), "completion_tokens": len(new)}


def make_model(model_dir, tokenizer_dir):
    os.makedirs(model_dir, exist_ok=True)
    shutil.copy(os.path.join(tokenizer_dir, "tokenizer.json"), model_dir)
    with open(os.path.join(tokenizer_dir, "tokenizer_config.json")) as f:
        tok_config = json.load(f)
    tok_config["chat_template"] = CHAT_TEMPLATE
    with open(os.path.join(model_dir, "tokenizer_config.json"), "w") as f:
        json.dump(tok_config, f, indent=2)
    tok = AutoTokenizer.from_pretrained(model_dir)
    eos = tok.convert_tokens_to_ids("<|end_of_text|>")
    torch.manual_seed(0)
    # Wide initial weights: the logits of a tiny random model then differ by far more than rounding, so greedy picks
    # the same token in any correct implementation, batched or not.
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=CONTEXT,
                      initializer_range=0.3, tie_word_embeddings=False, bos_token_id=None, eos_token_id=eos,
                      pad_token_id=eos)
    model = LlamaForCausalLM(cfg).eval()
    # Some continuations should end at the end-of-text token: it wins wherever " replaced" would (its head row a
    # little longer), which some prompts below reach.
    with torch.no_grad():
        model.lm_head.weight[eos] = 1.05 * model.lm_head.weight[tok.convert_tokens_to_ids("\u0120replaced")]
    model.generation_config.do_sample = False
    model.save_pretrained(model_dir)
    return tok, model, eos


def main():
    out_dir, tokenizer_dir = sys.argv[1], sys.argv[2]
    tok, model, eos = make_model(os.path.join(out_dir, "model"), tokenizer_dir)
    nochat = os.path.join(out_dir, "model_nochat")
    shutil.rmtree(nochat, ignore_errors=True)
    shutil.copytree(os.path.join(out_dir, "model"), nochat)
    shutil.copy(os.path.join(tokenizer_dir, "tokenizer_config.json"), nochat)
    expected = {"context": CONTEXT, "completions": [], "chat": [], "stop": []}
    for prompt, max_tokens in COMPLETIONS:
        ids = tok(prompt)["input_ids"]
        case = {"prompt": prompt, "max_tokens": max_tokens, "prompt_ids": ids}
        case.update(generate(model, tok, ids, max_tokens, eos))
        expected["completions"].append(case)
    for messages, max_tokens in CHATS:
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        case = {"messages": messages, "max_tokens": max_tokens}
        case.update(generate(model, tok, ids, max_tokens, eos))
        expected["chat"].append(case)
    # Stop strings: three letters from the middle of a continuation (their first appearance ends the text), and one
    # never found.
    for case in expected["completions"][5:8]:
        text = case["text"]
        i = len(text) // 2
        while not text[i:i + 3].isalpha():
            i += 1
        stops = [text[i:i + 3], "never@found"]
        expected["stop"].append({"prompt": case["prompt"], "max_tokens": case["max_tokens"], "stop": stops,
                                 "text": text[:text.find(stops[0])]})
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, ensure_ascii=False)
    print(json.dumps(expected, ensure_ascii=False)[:2000])


if __name__ == "__main__":
    main()
