"""Train the bundled demo model: a byte-level BPE tokenizer and a small Llama-architecture causal LM.

The corpus is the KG question-answer corpus of `scripts.demo_corpus` (or a JSONL file of
{"messages": [...]} conversations given with --corpus). The output folder is a Hugging Face
checkpoint the engine loads (config.json, model.safetensors, generation_config.json, tokenizer.json,
tokenizer_config.json with a chat template) plus TRAINING.md and loss_curve.png.

Seeded and deterministic on a given machine and thread count. transformers is used here only (a
dev dependency): the service loads the result with its own engine.

    python -m scripts.train_demo_model                          # the real run, into auditor/bundled_model/
    python -m scripts.train_demo_model --tiny --steps 3 --out /tmp/m --corpus tiny.jsonl   # smoke run
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import random
import sys
import time
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from engine.chat_templates import ROLE_MARKER_TOOLS_TEMPLATE

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "auditor" / "bundled_model"

BOS, EOS, PAD = "<s>", "<|end|>", "<pad>"
ROLE_TOKENS = {"system": "<|system|>", "user": "<|user|>", "assistant": "<|assistant|>"}
SPECIAL_TOKENS = [PAD, BOS, EOS, *ROLE_TOKENS.values()]
# One turn: "<|role|>\ncontent<|end|>\n". The generation prompt ends at "<|assistant|>\n", and the model
# stops by emitting <|end|> (the eos token). With tools, Hermes-style turns (engine.chat_templates).
CHAT_TEMPLATE = ROLE_MARKER_TOOLS_TEMPLATE


class TrainingError(ValueError):
    """Unusable training input (empty or malformed corpus, bad flags)."""


@dataclass(slots=True)
class TrainConfig:
    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 1024           # wide MLPs: that is where a small model keeps its facts
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 4
    context: int = 256              # max_position_embeddings and training window
    batch_size: int = 12
    steps: int = 600
    learning_rate: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 30
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    threads: int = 1                # one thread: on a shared 2-core machine two threads mostly wait on each other

    @classmethod
    def tiny(cls) -> TrainConfig:
        """A model of a few thousand parameters: for smoke tests of this script, not for use."""
        return cls(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                   num_key_value_heads=2, context=512, batch_size=2, steps=3, warmup_steps=1)


# -- corpus ---------------------------------------------------------------------------------------------
def read_corpus(path: Path) -> list[list[dict[str, str]]]:
    """JSONL of {"messages": [{"role", "content"}, ...]} -> conversations."""
    conversations = []
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            messages = json.loads(line)["messages"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise TrainingError(f"{path}:{line_no}: not a {{\"messages\": [...]}} record ({exc})") from exc
        if not messages or any(m.get("role") not in ROLE_TOKENS or not isinstance(m.get("content"), str)
                                for m in messages):
            raise TrainingError(f"{path}:{line_no}: messages need a known role and string content")
        conversations.append(messages)
    if not conversations:
        raise TrainingError(f"{path}: the corpus is empty")
    return conversations


def corpus_bytes(conversations: list[list[dict[str, str]]]) -> bytes:
    """Canonical JSONL bytes of a corpus (what its sha256 is taken over)."""
    return "".join(json.dumps({"messages": c}, sort_keys=True, ensure_ascii=False) + "\n"
                   for c in conversations).encode()


def render_turn(message: dict[str, str]) -> str:
    return f"{ROLE_TOKENS[message['role']]}\n{message['content']}{EOS}\n"


# -- tokenizer ------------------------------------------------------------------------------------------
def train_tokenizer(conversations: list[list[dict[str, str]]], vocab_size: int) -> Tokenizer:
    """Byte-level BPE (any text encodes; no unknown token) with the chat special tokens kept whole."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    texts = (m["content"] for c in conversations for m in c)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def tokenize_conversation(tokenizer: Tokenizer, messages: list[dict[str, str]]) -> tuple[list[int], list[int]]:
    """Token ids of BOS + turns, and labels: assistant content and its <|end|> are learned, the rest is -100."""
    bos = tokenizer.token_to_id(BOS)
    ids, labels = [bos], [-100]
    for message in messages:
        header = tokenizer.encode(f"{ROLE_TOKENS[message['role']]}\n", add_special_tokens=False).ids
        body = tokenizer.encode(f"{message['content']}{EOS}", add_special_tokens=False).ids
        tail = tokenizer.encode("\n", add_special_tokens=False).ids
        learn = message["role"] == "assistant"
        ids += header + body + tail
        labels += [-100] * len(header) + (body if learn else [-100] * len(body)) + [-100] * len(tail)
    return ids, labels


class PackedBatches:
    """Conversations packed back to back into [batch, context] windows, reshuffled every epoch (seeded)."""

    def __init__(self, examples: list[tuple[list[int], list[int]]], context: int, batch_size: int, seed: int):
        if any(len(ids) > context for ids, _ in examples):
            longest = max(len(ids) for ids, _ in examples)
            raise TrainingError(f"a conversation has {longest} tokens; the context is {context}")
        self.examples, self.context, self.batch_size = examples, context, batch_size
        self.rng = random.Random(seed)
        self.epoch = 0
        self._windows: list[tuple[list[int], list[int]]] = []

    def _fill(self) -> None:
        order = list(range(len(self.examples)))
        self.rng.shuffle(order)
        self.epoch += 1
        ids: list[int] = []
        labels: list[int] = []
        for index in order:
            ex_ids, ex_labels = self.examples[index]
            if len(ids) + len(ex_ids) > self.context:   # never split a conversation across windows
                self._windows.append(_padded(ids, labels, self.context))
                ids, labels = [], []
            ids += ex_ids
            labels += ex_labels
        if ids:
            self._windows.append(_padded(ids, labels, self.context))

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        while len(self._windows) < self.batch_size:
            self._fill()
        rows, self._windows = self._windows[:self.batch_size], self._windows[self.batch_size:]
        input_ids = torch.tensor([r[0] for r in rows])     # [batch, context]
        labels = torch.tensor([r[1] for r in rows])        # [batch, context], -100 = not learned
        return input_ids, labels


def _padded(ids: list[int], labels: list[int], context: int) -> tuple[list[int], list[int]]:
    pad = context - len(ids)
    return ids + [0] * pad, labels + [-100] * pad


# -- model and training ---------------------------------------------------------------------------------
def build_model(config: TrainConfig, vocab_size: int, tokenizer: Tokenizer) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM  # dev dependency: only this script needs it

    hf_config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads, max_position_embeddings=config.context,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True,
        bos_token_id=tokenizer.token_to_id(BOS), eos_token_id=tokenizer.token_to_id(EOS),
        pad_token_id=tokenizer.token_to_id(PAD),
    )
    return LlamaForCausalLM(hf_config)


def learning_rate(step: int, config: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to min_lr_ratio * learning_rate."""
    if step < config.warmup_steps:
        return config.learning_rate * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return config.learning_rate * (config.min_lr_ratio + (1 - config.min_lr_ratio) * cosine)


def train(model: Any, batches: PackedBatches, config: TrainConfig, log_every: int = 25) -> list[float]:
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]     # norms: no weight decay
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=config.learning_rate,
                                  betas=(0.9, 0.95))
    losses: list[float] = []
    model.train()
    started = time.perf_counter()
    for step in range(config.steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, config)
        input_ids, labels = batches.next()
        loss = model(input_ids=input_ids, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if (step + 1) % log_every == 0 or step + 1 == config.steps:
            elapsed = time.perf_counter() - started
            print(f"step {step + 1}/{config.steps} loss {losses[-1]:.4f} epoch {batches.epoch} "
                  f"{elapsed:.0f}s", flush=True)
    return losses


# -- outputs --------------------------------------------------------------------------------------------
def save_tokenizer(tokenizer: Tokenizer, out: Path, context: int) -> None:
    tokenizer.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS, "pad_token": PAD,
        "add_bos_token": False,   # the chat template writes BOS itself
        "model_max_length": context, "chat_template": CHAT_TEMPLATE,
        "additional_special_tokens": list(ROLE_TOKENS.values()),
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def save_loss_curve(losses: list[float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    window = max(1, len(losses) // 50)
    smoothed = [sum(losses[max(0, i - window + 1):i + 1]) / len(losses[max(0, i - window + 1):i + 1])
                for i in range(len(losses))]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot(range(1, len(losses) + 1), losses, alpha=0.3, label="loss per step")
    ax.plot(range(1, len(losses) + 1), smoothed, label=f"moving mean ({window} steps)")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (assistant tokens)")
    ax.set_yscale("log")
    ax.set_title("Demo model training loss")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def final_loss(losses: list[float]) -> float:
    """Mean of the last 20 steps (one step's loss depends on which conversations it drew)."""
    tail = losses[-20:]
    return sum(tail) / len(tail)


def write_training_md(out: Path, config: TrainConfig, *, corpus_sha256: str, corpus_size: int, skipped: int,
                      num_tokens: int,
                      num_params: int, losses: list[float], seconds: float, command: str) -> None:
    versions = {name: version(name) for name in ("torch", "transformers", "tokenizers")}
    lines = [
        "# Bundled demo model: training record",
        "",
        "A small Llama-architecture model trained by `scripts/train_demo_model.py` on question-answer",
        "conversations generated from the project's knowledge graphs (`scripts/demo_corpus.py`). It knows",
        "the KG facts it was trained on and nothing else; it exists so the service runs offline with no",
        "download. Any Hugging Face Llama-family checkpoint can replace it (`AUDITOR_MODEL_PATH`).",
        "",
        f"- command: `{command}`",
        f"- corpus: {corpus_size} conversations ({skipped} longer than the context left out), {num_tokens} tokens "
        f"trained on, sha256 `{corpus_sha256}`",
        f"- parameters: {num_params:,}",
        f"- steps: {config.steps} (batch {config.batch_size} x {config.context} tokens)",
        f"- final loss (mean of last 20 steps): {final_loss(losses):.4f}",
        f"- first-step loss: {losses[0]:.4f}",
        f"- training time: {seconds:.0f} s on {config.threads} CPU threads ({platform.processor() or platform.machine()})",
        f"- packages: {', '.join(f'{k}=={v}' for k, v in versions.items())}",
        "",
        "## Configuration",
        "",
        "```json",
        json.dumps(asdict(config), indent=2),
        "```",
        "",
        "![loss curve](loss_curve.png)",
        "",
    ]
    (out / "TRAINING.md").write_text("\n".join(lines))


def run(config: TrainConfig, out: Path, corpus: list[list[dict[str, str]]], command: str) -> dict[str, Any]:
    """Train and write the whole checkpoint folder; returns a summary."""
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    torch.set_num_threads(config.threads)
    torch.use_deterministic_algorithms(True)
    out.mkdir(parents=True, exist_ok=True)
    data = corpus_bytes(corpus)
    corpus_sha256 = hashlib.sha256(data).hexdigest()

    tokenizer = train_tokenizer(corpus, config.vocab_size)
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    tokenized = [tokenize_conversation(tokenizer, c) for c in corpus]
    # A conversation longer than the context cannot be learned whole; leave it out and say so.
    examples = [ex for ex in tokenized if len(ex[0]) <= config.context]
    skipped = len(tokenized) - len(examples)
    if not examples:
        raise TrainingError(f"every conversation is longer than the context ({config.context} tokens)")
    if skipped:
        print(f"skipped {skipped} conversations longer than the context ({config.context} tokens)", flush=True)
    num_tokens = sum(len(ids) for ids, _ in examples)
    model = build_model(config, vocab_size, tokenizer)
    num_params = sum(p.numel() for p in model.parameters())
    print(f"{len(corpus)} conversations, {num_tokens} tokens, vocab {vocab_size}, {num_params:,} parameters",
          flush=True)

    started = time.perf_counter()
    losses = train(model, PackedBatches(examples, config.context, config.batch_size, config.seed), config)
    seconds = time.perf_counter() - started

    model.eval()
    model.generation_config.eos_token_id = tokenizer.token_to_id(EOS)
    model.generation_config.bos_token_id = tokenizer.token_to_id(BOS)
    model.generation_config.pad_token_id = tokenizer.token_to_id(PAD)
    model.save_pretrained(out, safe_serialization=True)
    save_tokenizer(tokenizer, out, config.context)
    save_loss_curve(losses, out / "loss_curve.png")
    write_training_md(out, config, corpus_sha256=corpus_sha256, corpus_size=len(corpus), skipped=skipped,
                      num_tokens=num_tokens,
                      num_params=num_params, losses=losses, seconds=seconds, command=command)
    return {"out": str(out), "steps": config.steps, "final_loss": final_loss(losses), "seconds": seconds,
            "skipped_conversations": skipped,
            "corpus_sha256": corpus_sha256, "num_params": num_params}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Train the bundled demo model (tokenizer + small Llama).")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="checkpoint folder to write")
    parser.add_argument("--corpus", type=Path, help="JSONL of {\"messages\": [...]}; default: built from the KGs")
    parser.add_argument("--tiny", action="store_true", help="a tiny model and batch, for smoke tests")
    parser.add_argument("--steps", type=int, help="optimizer steps (default: 600, or 3 with --tiny)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, help="torch CPU threads (default 1)")
    args = parser.parse_args(argv)
    config = TrainConfig.tiny() if args.tiny else TrainConfig()
    config.seed = args.seed
    if args.steps is not None:
        if args.steps < 1:
            parser.error("--steps must be >= 1")
        config.steps = args.steps
        config.warmup_steps = min(config.warmup_steps, max(1, args.steps // 10))
    if args.threads is not None:
        config.threads = args.threads
    try:
        if args.corpus is not None:
            corpus = read_corpus(args.corpus)
        else:
            from scripts.demo_corpus import build_corpus, load_domain_kgs

            corpus = build_corpus(load_domain_kgs(["finance", "legal", "medical"]), seed=args.seed)
        command = "python -m scripts.train_demo_model " + " ".join(argv if argv is not None else sys.argv[1:])
        summary = run(config, args.out, corpus, command.strip())
    except (TrainingError, OSError) as exc:
        print(f"train_demo_model: error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:   # e.g. broken curated KG data
        print(f"train_demo_model: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
