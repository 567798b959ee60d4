"""The fine-tuning references of tests/data/sft_test.cc: prompt/response pairs and chat conversations tokenized by
ds_preprocess --sft, and what Hugging Face would compute from the same data: the ids (`tokenizers`; for
conversations transformers' apply_chat_template), the labels (-100 on the prompt, as SFT trainers build them; for
conversations -100 outside transformers' assistant_masks) and transformers' loss of a tiny random Llama with the
tokenizer's vocabulary.

Usage: make_sft.py BIN_DIR TOKENIZERS_DIR OUT_DIR CHAT_TEMPLATE (TOKENIZERS_DIR: make_tokenizers.py's output;
CHAT_TEMPLATE: the shipped examples/chat_templates/llama3.json). Writes OUT_DIR/sft_model/ (the Llama),
OUT_DIR/{pairs,chats}_sft_document and _sft_loss_mask_document (.bin/.idx, by ds_preprocess) and
OUT_DIR/expected_{pairs,chats}.json: per document {"ids": [...], "labels": [...], "loss": transformers' loss of
ids[:SEQ + 1]} (CHAT_SEQ for conversations).
"""
import json
import os
import subprocess
import sys

import torch
from tokenizers import AddedToken, Tokenizer
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SEQ = 32  # sft_test.cc's sequence length for pairs: some are cut to SEQ + 1 tokens, some padded
CHAT_SEQ = 96  # and for conversations: whole, padded
PAIRS = [
    ("Translate to German: good morning", "Guten Morgen"),
    ("What is 12 + 30?", "It is 42."),
    ("Write a haiku about the sea.", "Waves fold into foam,\nsalt wind over grey water,\nthe tide keeps its time."),
    ("日本の首都は？", "東京です。"),
    ("Summarise: the quick brown fox jumps over the lazy dog.", "A fox jumps a dog."),
    ("Emoji?", "🙂🤖✨"),
]

# Conversations: multi-turn (two assistant turns train), with and without a system message (the template's
# default_system opens those without), CJK and newlines inside turns.
CHATS = [
    [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello. How can I help?"}],
    [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Capital of France?"},
     {"role": "assistant", "content": "Paris"}, {"role": "user", "content": "And of Japan?"},
     {"role": "assistant", "content": "Tokyo"}],
    [{"role": "user", "content": "日本の首都は？"}, {"role": "assistant", "content": "東京です。"}],
    [{"role": "user", "content": "Two lines?"}, {"role": "assistant", "content": "One,\ntwo."}],
]
DEFAULT_SYSTEM = "Be brief."
# transformers' Jinja form of examples/chat_templates/llama3.json with DEFAULT_SYSTEM: the same text, and the
# {% generation %} span marks the assistant tokens (return_assistant_tokens_mask).
JINJA = ("{{ bos_token }}{% if messages[0]['role'] != 'system' %}<|start_header_id|>system<|end_header_id|>\n\n"
         + DEFAULT_SYSTEM + "<|eot_id|>{% endif %}{% for m in messages %}{% if m['role'] == 'assistant' %}"
         "<|start_header_id|>assistant<|end_header_id|>\n\n{% generation %}{{ m['content'] }}<|eot_id|>"
         "{% endgeneration %}{% else %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] }}"
         "<|eot_id|>{% endif %}{% endfor %}")


def chat_tokenizer(tok_dir, out):
    """The llama3 test tokenizer with Llama 3's header tokens added, in OUT/chat_tok/, and transformers' view of it."""
    tok = Tokenizer.from_file(os.path.join(tok_dir, "llama3", "tokenizer.json"))
    tok.add_special_tokens([AddedToken("<|start_header_id|>", special=True, normalized=False),
                            AddedToken("<|end_header_id|>", special=True, normalized=False)])
    folder = os.path.join(out, "chat_tok")
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|end_of_text|>"}, f)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")
    hf.chat_template = JINJA
    return folder, hf


def preprocess(bin_dir, jsonl, prefix, folder, extra):
    subprocess.run([os.path.join(bin_dir, "ds_preprocess"), "--input", jsonl, "--output-prefix", prefix,
                    "--tokenizer-model", folder, "--sft", "--append-eod", "--add-special-tokens"] + extra, check=True,
                   capture_output=True)


def expected_of(model, ids, labels, seq):
    n = min(len(ids), seq + 1)
    with torch.no_grad():
        loss = model(input_ids=torch.tensor([ids[:n]]), labels=torch.tensor([labels[:n]])).loss.item()
    return {"ids": ids, "labels": labels, "loss": loss}


def main():
    bin_dir, tok_dir, out, template = sys.argv[1:5]
    os.makedirs(out, exist_ok=True)
    folder = os.path.join(tok_dir, "llama3")
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|end_of_text|>"}, f)
    chat_folder, hf = chat_tokenizer(tok_dir, out)
    with open(os.path.join(out, "pairs.jsonl"), "w", encoding="utf-8") as f:
        for p, r in PAIRS:
            f.write(json.dumps({"question": p, "answer": r}, ensure_ascii=False) + "\n")
    preprocess(bin_dir, os.path.join(out, "pairs.jsonl"), os.path.join(out, "pairs"), folder,
               ["--prompt-key", "question", "--response-key", "answer"])
    with open(template) as f:
        chat_template = json.load(f)
    chat_template["default_system"] = DEFAULT_SYSTEM
    with open(os.path.join(out, "chat_template.json"), "w") as f:
        json.dump(chat_template, f)
    with open(os.path.join(out, "chats.jsonl"), "w", encoding="utf-8") as f:
        for c in CHATS:
            f.write(json.dumps({"conversation": c}, ensure_ascii=False) + "\n")
    preprocess(bin_dir, os.path.join(out, "chats.jsonl"), os.path.join(out, "chats"), chat_folder,
               ["--chat-template", os.path.join(out, "chat_template.json"), "--messages-key", "conversation"])

    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    eod = tok.token_to_id("<|end_of_text|>")
    torch.manual_seed(3)
    config = LlamaConfig(vocab_size=len(hf), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval()  # max_position_embeddings: only rope's cache length
    model.save_pretrained(os.path.join(out, "sft_model"))
    pairs = []
    for p, r in PAIRS:
        prompt = tok.encode(p, add_special_tokens=True).ids
        response = tok.encode(r, add_special_tokens=False).ids + [eod]
        pairs.append(expected_of(model, prompt + response, [-100] * len(prompt) + response, SEQ))
    chats = []
    for c in CHATS:
        enc = hf.apply_chat_template(c, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        ids, mask = list(enc["input_ids"]) + [eod], list(enc["assistant_masks"]) + [1]
        chats.append(expected_of(model, ids, [t if m else -100 for t, m in zip(ids, mask)], CHAT_SEQ))
    for name, expected in (("pairs", pairs), ("chats", chats)):
        with open(os.path.join(out, f"expected_{name}.json"), "w") as f:
            json.dump(expected, f)
        print(f"{name}: {len(expected)} documents; lengths {[len(e['ids']) for e in expected]}; "
              f"trained {[sum(t != -100 for t in e['labels']) for e in expected]}")


if __name__ == "__main__":
    main()
