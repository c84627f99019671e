"""Web app (minimal for now): type a prompt, get SmolLM2's greedy reply."""

from __future__ import annotations

import gradio as gr
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from workbench import store

MODEL_DIR = store.resolve_target(None)
tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
model = AutoModelForCausalLM.from_pretrained(MODEL_DIR, dtype=torch.float32).eval()


def generate(prompt: str, max_new_tokens: int) -> str:
    enc = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.inference_mode():
        out = model.generate(
            **enc, max_new_tokens=int(max_new_tokens), do_sample=False, pad_token_id=tokenizer.pad_token_id
        )
    return tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)


with gr.Blocks(title="EAGLE-2 Workbench") as demo:
    gr.Markdown(f"# EAGLE-2 Workbench\nModel: `{MODEL_DIR}` (greedy decoding)")
    prompt = gr.Textbox(label="Prompt", value="What is speculative decoding?", lines=3)
    max_new = gr.Slider(1, 256, value=64, step=1, label="Max new tokens")
    button = gr.Button("Generate", variant="primary")
    output = gr.Textbox(label="Output", lines=8)
    button.click(generate, inputs=[prompt, max_new], outputs=output)

if __name__ == "__main__":
    demo.launch(server_name="127.0.0.1", server_port=7860)
