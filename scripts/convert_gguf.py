"""Convert a GGUF chat model into a Hugging Face safetensors folder that vLLM's CPU build reads.

vLLM's CPU build does not load GGUF, so the agent's default model is dequantised once with
transformers (run by .venv-vllm's python, see scripts/setup_vllm.sh). transformers keeps a
GGUF-loaded model marked as GGUF-quantised, and vLLM would then look for a GGUF file: the
quantiser and its config are dropped before saving. The tokenizer is saved with the GGUF's
chat template, so vLLM formats the prompt exactly as llama.cpp does. Writes
``converted-from`` (the GGUF's name) last, as the sign that the folder is complete.

    .venv-vllm/bin/python scripts/convert_gguf.py MODEL.gguf OUT_DIR
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def convert(gguf: Path, out: Path) -> None:
    """Dequantise ``gguf`` into ``out`` (float32 weights, tokenizer, chat template)."""
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if not tokenizer.chat_template:
        raise SystemExit(f"error: {gguf.name} carries no chat template")
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    # Loaded from GGUF, the model still says it is GGUF-quantised; the saved tensors are not.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    (out / "converted-from").write_text(gguf.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gguf", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    convert(args.gguf, args.out)
    print(f"converted {args.gguf.name} -> {args.out}")


if __name__ == "__main__":
    main()
