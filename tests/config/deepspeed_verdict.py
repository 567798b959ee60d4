#!/usr/bin/env python3
"""Asks the real DeepSpeed (the Python package in the venv, CPU only) whether it accepts each config file.

usage: deepspeed_verdict.py FILE...

For each FILE it prints one JSON line on stdout:
  {"file": basename, "verdict": "accept"|"refuse", "error": "<Type: first line of the exception, or empty>",
   "error_detail": "<whole exception message, lines joined by ' | ' (pydantic's URL lines left out), or empty>",
   "filled": {dotted key: value put in place of "auto"},
   "unfilled_auto": [dotted keys still "auto" after the fills],
   "hf_mismatches": [Trainer's own mismatch messages, informational; only for files with some "auto"],
   "warnings": [warning/error lines DeepSpeed logged while building the config]}
Nothing else goes to stdout (DeepSpeed's own log output is sent to stderr).

What it does, per file:
1. Reads the file the way DeepSpeedConfig(path) does (deepspeed/runtime/config.py):
   hjson.load(open(path, "r"), object_pairs_hook=dict_raise_error_on_duplicate_keys). A file that fails to
   parse is a "refuse" (DeepSpeed would stop there too).
2. Replaces "auto" values the way Hugging Face's Trainer does (transformers/integrations/deepspeed.py,
   HfTrainerDeepSpeedConfig.trainer_config_process + trainer_config_finalize, current main which uses
   int(0.9 * hidden * hidden)), with DEFAULT TrainingArguments: per_device_train_batch_size 8,
   gradient_accumulation_steps 1, world_size 1, max_grad_norm 1.0, learning_rate 5e-5, adam betas
   (0.9, 0.999), adam_epsilon 1e-8, weight_decay 0.0, warmup 0 steps, num_training_steps 1000, and a model
   with hidden_size 4096. Precision: with default arguments (no --fp16 / --bf16) "fp16.enabled" and
   "bf16.enabled" "auto" become false; DS_VERDICT_MODEL_DTYPE=bf16 (or fp16) makes the run as if the user passed
   --bf16 (--fp16). Trainer's fill_match only replaces a value that
   is exactly "auto" at that exact dotted path (e.g. "bfloat16.enabled" or "zero_optimization.prefetch_bucket_size"
   are NOT filled). Then the "auto" fills that accelerate's DeepSpeedPlugin.__post_init__ does when the Trainer
   builds its Accelerator (plugin defaults, no ACCELERATE_* environment): zero_optimization.stage -> 2,
   zero_optimization.offload_{optimizer,param}.device -> "none", ...nvme_path -> "none",
   zero_optimization.stage3_gather_16bit_weights_on_model_save -> false. Only "auto" values are replaced; keys are
   never added (accelerate would also add gradient_accumulation_steps 1 when missing and set steps_per_print to
   inf; that is not done here).
   Keys still "auto" afterwards are listed in "unfilled_auto": in the real Trainer flow accelerate's
   _prepare_deepspeed would raise "`KEY` not found in kwargs" for them; DeepSpeed itself silently drops "auto"
   inside its pydantic sections (DeepSpeedConfigModel.__init__ with strict=False), which is what the verdict shows.
   "hf_mismatches" lists what Trainer's fill_match would report (it raises on any of them in
   trainer_config_finalize); with precision args taken as matching the file's explicit settings. They do not
   change the verdict, which is DeepSpeed's alone.
3. Builds deepspeed.runtime.config.DeepSpeedConfig(config_dict) with no mpu. torch.distributed is not
   initialised, so DeepSpeed's dist.get_rank() asserts and DeepSpeedConfig falls back to rank 0, world size 1.
   "accept" if construction succeeds, "refuse" with the exception otherwise. Every file is handled on its own.
"""
import contextlib
import copy
import json
import logging
import os
import sys
import warnings

os.environ["DS_ACCELERATOR"] = "cpu"

HIDDEN_SIZE = 4096
NUM_TRAINING_STEPS = 1000


class _DefaultTrainingArguments:
    per_device_train_batch_size = 8
    gradient_accumulation_steps = 1
    world_size = 1
    max_grad_norm = 1.0
    learning_rate = 5e-5
    adam_beta1 = 0.9
    adam_beta2 = 0.999
    adam_epsilon = 1e-8
    weight_decay = 0.0
    warmup_steps = 0
    fp16 = False
    fp16_full_eval = False
    bf16 = False
    bf16_full_eval = False

    def get_warmup_steps(self, num_training_steps):
        return self.warmup_steps


class _Filler:
    """The parts of accelerate's HfDeepSpeedConfig and transformers' HfTrainerDeepSpeedConfig that fill "auto"."""

    def __init__(self, config):
        self.config = config
        self.filled = {}
        self.mismatches = []

    def find_config_node(self, ds_key_long):
        config = self.config
        nodes = ds_key_long.split(".")
        ds_key = nodes.pop()
        for node in nodes:
            config = config.get(node) if isinstance(config, dict) else None
            if config is None:
                return None, ds_key
        if not isinstance(config, dict):
            return None, ds_key
        return config, ds_key

    def get_value(self, ds_key_long, default=None):
        config, ds_key = self.find_config_node(ds_key_long)
        if config is None:
            return default
        return config.get(ds_key, default)

    def is_auto(self, ds_key_long):
        val = self.get_value(ds_key_long)
        return val is not None and val == "auto"

    def is_zero3(self):
        return self.get_value("zero_optimization.stage", -1) == 3

    def fill_match(self, ds_key_long, hf_val, hf_key=None, must_match=True):
        config, ds_key = self.find_config_node(ds_key_long)
        if config is None:
            return
        if config.get(ds_key) == "auto":
            config[ds_key] = hf_val
            self.filled[ds_key_long] = hf_val
            return
        if not must_match:
            return
        ds_val = config.get(ds_key)
        if ds_val is not None and ds_val != hf_val:
            self.mismatches.append(f"- ds {ds_key_long}={ds_val} vs hf {hf_key}={hf_val}")

    def fill_only(self, ds_key_long, hf_val):
        self.fill_match(ds_key_long, hf_val, must_match=False)

    def trainer_config_process(self, args):
        train_batch_size = args.world_size * args.per_device_train_batch_size * args.gradient_accumulation_steps
        self.fill_match("train_micro_batch_size_per_gpu", args.per_device_train_batch_size,
                        "per_device_train_batch_size")
        self.fill_match("gradient_accumulation_steps", args.gradient_accumulation_steps, "gradient_accumulation_steps")
        self.fill_match("train_batch_size", train_batch_size, "train_batch_size (calculated)")
        self.fill_match("gradient_clipping", args.max_grad_norm, "max_grad_norm")

        self.fill_match("optimizer.params.lr", args.learning_rate, "learning_rate")
        self.fill_match("optimizer.params.betas", [args.adam_beta1, args.adam_beta2], "adam_beta1+adam_beta2")
        self.fill_match("optimizer.params.eps", args.adam_epsilon, "adam_epsilon")
        self.fill_match("optimizer.params.weight_decay", args.weight_decay, "weight_decay")

        self.fill_only("scheduler.params.warmup_min_lr", 0)
        self.fill_match("scheduler.params.warmup_max_lr", args.learning_rate, "learning_rate")

        self.fill_match("fp16.enabled", (args.fp16 or args.fp16_full_eval), "fp16|fp16_full_eval")
        self.fill_match("bf16.enabled", (args.bf16 or args.bf16_full_eval), "bf16|bf16_full_eval")

    def accelerate_plugin_post_init(self):
        # accelerate.utils.dataclasses.DeepSpeedPlugin.__post_init__ with hf_ds_config given, default plugin
        # fields (gradient_accumulation_steps "auto", gradient_clipping None -> not passed), must_match=False.
        kwargs = {
            "gradient_accumulation_steps": "auto",
            "zero_optimization.stage": 2,
            "zero_optimization.offload_optimizer.device": "none",
            "zero_optimization.offload_param.device": "none",
            "zero_optimization.offload_param.nvme_path": "none",
            "zero_optimization.offload_optimizer.nvme_path": "none",
            "zero_optimization.stage3_gather_16bit_weights_on_model_save": False,
        }
        for key, value in kwargs.items():
            config, ds_key = self.find_config_node(key)
            if config is not None and config.get(ds_key) == "auto" and value != "auto":
                config[ds_key] = value
                self.filled[key] = value

    def trainer_config_finalize(self, args, hidden_size, num_training_steps):
        hidden_size_based_keys = [
            "zero_optimization.reduce_bucket_size",
            "zero_optimization.stage3_prefetch_bucket_size",
            "zero_optimization.stage3_param_persistence_threshold",
        ]
        if any(self.is_auto(x) for x in hidden_size_based_keys):
            self.fill_only("zero_optimization.reduce_bucket_size", hidden_size * hidden_size)
            if self.is_zero3():
                self.fill_only("zero_optimization.stage3_prefetch_bucket_size", int(0.9 * hidden_size * hidden_size))
                self.fill_only("zero_optimization.stage3_param_persistence_threshold", 10 * hidden_size)
        self.fill_match("scheduler.params.total_num_steps", num_training_steps, "num_training_steps (calculated)")
        self.fill_match("scheduler.params.warmup_num_steps", args.get_warmup_steps(num_training_steps),
                        "warmup_steps")


def _auto_paths(value, prefix=""):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _auto_paths(v, f"{prefix}{k}.")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _auto_paths(v, f"{prefix}{i}.")
    elif value == "auto":
        yield prefix[:-1]


def fill_auto(config):
    """Fills "auto" in place; returns (filled, unfilled_auto, hf_mismatches)."""
    had_auto = any(True for _ in _auto_paths(config))
    filler = _Filler(config)
    args = _DefaultTrainingArguments()
    fp16_enabled = filler.get_value("fp16.enabled")
    bf16_enabled = filler.get_value("bf16.enabled")
    # "auto" precision: the Trainer's default arguments (no --fp16/--bf16) unless DS_VERDICT_MODEL_DTYPE names the
    # model's dtype. Explicit settings are taken as what the user asked for on the command line, so they are not
    # reported as mismatches.
    model_dtype = os.environ.get("DS_VERDICT_MODEL_DTYPE", "fp32")
    args.bf16 = (bf16_enabled == "auto" and model_dtype == "bf16") or bf16_enabled is True
    args.fp16 = ((fp16_enabled == "auto" and model_dtype == "fp16") or fp16_enabled is True or
                 str(fp16_enabled).lower() == "true") and not args.bf16
    filler.trainer_config_process(args)
    filler.accelerate_plugin_post_init()
    filler.trainer_config_finalize(args, HIDDEN_SIZE, NUM_TRAINING_STEPS)
    # A file with no "auto" at all was not written for the Trainer; its mismatches with default arguments are noise.
    mismatches = filler.mismatches if had_auto else []
    return filler.filled, list(_auto_paths(config)), mismatches


class _ListHandler(logging.Handler):

    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.lines = []

    def emit(self, record):
        try:
            self.lines.append(f"{record.levelname}: {record.getMessage()}")
        except Exception as e:  # a broken log call must not hide the verdict
            self.lines.append(f"{record.levelname}: <unformattable log record: {e}>")


def _one_line(text):
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0] if lines else ""


def _describe(e):
    first = _one_line(e)
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("For further information visit")]  # pydantic's URL lines
    return (f"{type(e).__name__}: {first}" if first else type(e).__name__, " | ".join(lines))


def resolved_values(c):
    """What DeepSpeed made of the config, under our dump's dotted keys (world size 1): what a run acts on."""
    z = c.zero_config
    values = {
        "train_batch_size": c.train_batch_size,
        "train_micro_batch_size_per_gpu": c.train_micro_batch_size_per_gpu,
        "gradient_accumulation_steps": c.gradient_accumulation_steps,
        "gradient_clipping": c.gradient_clipping,
        "fp16.enabled": bool(c.float16_config.enabled),
        "bf16.enabled": bool(c.bfloat16_config.enabled),
        "zero_optimization.stage": int(c.zero_optimization_stage),
        "zero_optimization.offload_optimizer.device":
            str(z.offload_optimizer.device.value if hasattr(z.offload_optimizer.device, "value")
                else z.offload_optimizer.device) if z.offload_optimizer else "none",
    }
    if c.zero_optimization_stage == 3:
        values.update({
            "zero_optimization.stage3_prefetch_bucket_size": int(z.prefetch_bucket_size),
            "zero_optimization.stage3_param_persistence_threshold": int(z.param_persistence_threshold),
            "zero_optimization.stage3_max_live_parameters": int(z.max_live_parameters),
            "zero_optimization.stage3_max_reuse_distance": int(z.max_reuse_distance),
            "zero_optimization.stage3_gather_16bit_weights_on_model_save": bool(z.gather_16bit_weights_on_model_save),
            "zero_optimization.offload_param.device":
                str(z.offload_param.device.value if hasattr(z.offload_param.device, "value")
                    else z.offload_param.device) if z.offload_param else "none",
        })
    if c.zero_optimization_stage >= 2:
        values["zero_optimization.reduce_bucket_size"] = int(z.reduce_bucket_size)
    if c.optimizer_name:
        values["optimizer.type"] = str(c.optimizer_name).lower()
        for key, value in (c.optimizer_params or {}).items():
            if key in ("lr", "betas", "eps", "weight_decay", "momentum"):
                values["optimizer.params." + key] = list(value) if isinstance(value, (list, tuple)) else value
    if c.scheduler_name:
        values["scheduler.type"] = str(c.scheduler_name).lower()
    return values


def judge(path, DeepSpeedConfig, dict_raise_error_on_duplicate_keys, hjson, ds_logging, handler):
    result = {
        "file": os.path.basename(path),
        "verdict": "refuse",
        "error": "",
        "error_detail": "",
        "filled": {},
        "unfilled_auto": [],
        "hf_mismatches": [],
        "warnings": [],
    }
    handler.lines = []
    try:
        ds_logging.warning_once.cache_clear()  # warning_once is lru_cached across calls; reset per file
    except AttributeError:
        pass
    try:
        with open(path, "r") as f:
            config = hjson.load(f, object_pairs_hook=dict_raise_error_on_duplicate_keys)
    except BaseException as e:  # noqa: B036 - a parse failure is a refusal, whatever it is
        result["error"], result["error_detail"] = _describe(e)
        return result
    try:
        if isinstance(config, dict):
            config = copy.deepcopy(config)
            result["filled"], result["unfilled_auto"], result["hf_mismatches"] = fill_auto(config)
    except Exception as e:  # filling is best effort; DeepSpeed still gets the config
        result["hf_mismatches"].append(f"(auto filling failed: {type(e).__name__}: {_one_line(e)})")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            parsed = DeepSpeedConfig(config)
            result["verdict"] = "accept"
            result["resolved"] = resolved_values(parsed)
        except BaseException as e:  # noqa: B036 - SystemExit from an assert-happy path is a refusal too
            if isinstance(e, KeyboardInterrupt):
                raise
            result["error"], result["error_detail"] = _describe(e)
    result["warnings"] = list(handler.lines) + [f"python {w.category.__name__}: {_one_line(w.message)}" for w in caught]
    return result


def main():
    files = sys.argv[1:]
    if not files:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    real_stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        import hjson
        from deepspeed.runtime.config import DeepSpeedConfig
        from deepspeed.runtime.config_utils import dict_raise_error_on_duplicate_keys
        from deepspeed.utils import logging as ds_logging
        ds_logger = ds_logging.logger
        for h in ds_logger.handlers:
            if isinstance(h, logging.StreamHandler):
                h.setStream(sys.stderr)
        handler = _ListHandler()
        ds_logger.addHandler(handler)
        for path in files:
            result = judge(path, DeepSpeedConfig, dict_raise_error_on_duplicate_keys, hjson, ds_logging, handler)
            real_stdout.write(json.dumps(result, default=str) + "\n")
            real_stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
