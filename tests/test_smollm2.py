"""The promises on the real target, SmolLM2-135M-Instruct at fp32, through the CLI contract:
plain greedy decoding equals transformers ``generate`` token for token, and so do ``linear``
``eagle2`` and ``static`` (speculation never changes the greedy output)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import computed_once, real_model_threads

ROOT = Path(__file__).resolve().parents[1]
N_PROMPTS, NEW_TOKENS = 6, 48  # one question of each of Spec-Bench's six categories (they come in blocks)


def spec_bench_file() -> Path:
    for p in (ROOT / "workbench/data/spec_bench_questions.jsonl", ROOT.parent / "shared/data/spec_bench_questions.jsonl"):
        if p.exists():
            return p
    pytest.skip("Spec-Bench questions not found")


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory):
    rows = [json.loads(line) for line in spec_bench_file().read_text().splitlines()]
    step = len(rows) // N_PROMPTS  # spread over every category
    chosen = rows[::step][:N_PROMPTS]
    path = tmp_path_factory.mktemp("prompts") / "questions.jsonl"
    path.write_text("".join(json.dumps({"question_id": r["question_id"], "turns": r["turns"]}) + "\n" for r in chosen))
    return path


def run_cli(*args) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "workbench", "generate", *args, "--json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-2000:]
    return [json.loads(line) for line in out.stdout.splitlines()]


@pytest.fixture(scope="module")
def hf_reference(prompt_file, smollm2_dir, tmp_path_factory):
    """{question id: transformers ``generate``'s greedy tokens}: computed once for the session,
    shared by every method's test and every worker (``helpers.computed_once``)."""
    rows = [json.loads(line) for line in prompt_file.read_text().splitlines()]

    def generate() -> list[tuple[int, list[int]]]:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(real_model_threads())
        tok = AutoTokenizer.from_pretrained(smollm2_dir)
        hf = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
        refs = []
        for row in rows:
            ids = tok.apply_chat_template([{"role": "user", "content": row["turns"][0]}], add_generation_prompt=True)
            ids = torch.tensor([list(ids["input_ids"])])
            with torch.no_grad():
                out = hf.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False)
            refs.append((row["question_id"], out[0, ids.shape[1]:].tolist()))
        torch.set_num_threads(1)
        return refs

    return dict(computed_once(tmp_path_factory, "smollm2-hf-reference", generate))


@pytest.mark.slow
@pytest.mark.parametrize("method", ["vanilla", "linear", "eagle2", "static"])
def test_greedy_equals_transformers_generate(method, prompt_file, hf_reference):
    sizes = ["--num-draft-tokens", "16"] if method == "static" else []  # EAGLE-1's tree to depth 3
    results = run_cli("--method", method, *sizes, "--prompts", str(prompt_file), "--max-new-tokens", str(NEW_TOKENS),
                      "--dtype", "fp32")
    assert len(results) == N_PROMPTS
    for r in results:
        assert r["output_ids"] == hf_reference[r["id"]], f"question {r['id']}"
        assert r["new_tokens"] == len(r["output_ids"]) and r["tokens_per_s"] > 0
        if method != "vanilla":
            assert r["target_forwards"] == len(r["accept_lengths"]) + 1  # + the prefill
            assert sum(r["accept_lengths"]) + 1 == r["new_tokens"]  # tokens each step emitted


@pytest.mark.parametrize("args, message", [
    (["--prompt", "   "], "the prompt is empty"),
    (["--prompt", "hi", "--target", "/nonexistent"], "--target /nonexistent"),
    (["--prompt", "hi", "--topk", "3", "--num-draft-tokens", "500"], "--num-draft-tokens must be in 2..40"),
    (["--prompt", "hi", "--method", "linear", "--topk", "2"], "--topk must be 1"),
    (["--prompt", "hi", "--top-p", "1.5"], "argument --top-p: expected a number in (0, 1]"),
    (["--prompt", "hi", "--method", "static", "--tree", "[[0],[0,1"], "--tree is not valid JSON"),
    (["--prompt", "hi", "--method", "static", "--tree", "[[0],[1,0]]"], "tree path [1, 0] has no parent: add [1]"),
    (["--prompt", "hi", "--method", "static", "--tree", "[[0],[0]]"], "tree path [0] is listed twice"),
    (["--prompt", "hi", "--method", "static", "--tree", "[[0],[16]]"], "ranks must be in 0..15"),
    (["--prompt", "hi", "--method", "static", "--num-draft-tokens", "300"], "--num-draft-tokens must be in 2..256"),
    (["--prompt", "hi", "--method", "static", "--tree", "[[0],[1]]", "--num-draft-tokens", "5"],
     "--tree has 2 nodes + the root = 3 verify tokens"),
    (["--prompt", "hi", "--method", "static", "--topk", "3"], "leave --num-steps and --topk out"),
    (["--prompt", "hi", "--method", "eagle2", "--tree", "[[0]]"], "use it with --method static"),
    (["--prompt", "hi", "--max-new-tokens", "0"], "--max-new-tokens must be > 0"),
    (["--prompts", "/nonexistent.jsonl"], "--prompts /nonexistent.jsonl"),
])
def test_bad_input_gets_one_clear_line(args, message, tmp_path):
    out = subprocess.run([sys.executable, "-m", "workbench", "generate", *args, "--json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr
    assert out.stdout == ""


@pytest.mark.slow
def test_overlong_prompt_is_refused(smollm2_dir, tmp_path):
    out = subprocess.run([sys.executable, "-m", "workbench", "generate", "--prompt", "word " * 9000, "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 2 and "exceeds the model's context of 8192" in out.stderr
