"""A held-out set of 17 small random-init models (none of them in tests/test_torch_zoo.py) through
torch.compile(backend="dvmlang"): per model whether it matches torch eager (forward; loss and gradients where it
trains; tokens where it generates), the aten ops that fell back with their reasons, launches and simulated time.

    python benchmarks/torch_heldout.py [NAME ...]

Offline: transformers configs and torch.nn modules, random weights, no downloads."""

from __future__ import annotations

import sys
import time

import torch

import dvmlang.torch as D

be = sys.modules["dvmlang.torch.backend"]
T = None


def _reasons(start):
    out = {}
    for cg in be.made_since(start):
        out.update(cg.fallbacks)
    return out


def _close(a, b):
    return torch.allclose(a.float(), b.float(), rtol=1e-3, atol=1e-4)


def check(make, inputs, kind="forward", out=lambda o: o, dynamic=False):
    torch.manual_seed(0)
    m = make()
    ref = make()
    ref.load_state_dict(m.state_dict())
    torch._dynamo.reset()
    D.reset_stats()
    if kind == "generate":
        with torch.no_grad():
            want = ref.generate(*inputs, max_new_tokens=4, do_sample=False, pad_token_id=0)
            fwd = m.forward
            m.forward = torch.compile(fwd, backend="dvmlang", dynamic=True)
            got = m.generate(*inputs, max_new_tokens=4, do_sample=False, pad_token_id=0)
        return torch.equal(got, want)
    c = torch.compile(m, backend="dvmlang", dynamic=dynamic)
    if kind == "train":
        a, b = out(c(*inputs)), out(ref(*inputs))
        a.backward()
        b.backward()
        ok = _close(a, b)
        for p, q in zip(m.parameters(), ref.parameters()):
            if q.grad is not None:
                ok = ok and _close(p.grad, q.grad)
        return ok
    with torch.no_grad():
        return _close(out(c(*inputs)), out(ref(*inputs)))


def models():
    import transformers as t
    lm = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
              max_position_embeddings=64)
    ids = torch.randint(0, 64, (2, 9))
    one = torch.randint(0, 64, (1, 6))
    img = torch.randn(2, 3, 16, 16)

    def seq(mods):
        return lambda: torch.nn.Sequential(*mods()).eval()

    class UNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.down = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
            self.mid = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.up = torch.nn.Conv2d(11, 4, 3, padding=1)

        def forward(self, x):
            h = torch.relu(self.mid(torch.relu(self.down(x))))
            h = torch.nn.functional.interpolate(h, scale_factor=2.0, mode="bilinear", align_corners=False)
            return self.up(torch.cat([h, x], 1))

    class BiLSTM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(64, 8)
            self.rnn = torch.nn.LSTM(8, 8, batch_first=True, bidirectional=True)
            self.out = torch.nn.Linear(16, 4)

        def forward(self, x):
            return self.out(self.rnn(self.emb(x))[0].mean(1))

    class Loss(torch.nn.Module):
        def __init__(self, m, *names):
            super().__init__()
            self.m, self.names = m, names

        def forward(self, *a):
            return self.m(**dict(zip(self.names, a))).loss if self.names else self.m(*a).loss

    mobilenet = seq(lambda: [torch.nn.Conv2d(3, 8, 3, stride=2, padding=1), torch.nn.BatchNorm2d(8),
                             torch.nn.ReLU6(), torch.nn.Conv2d(8, 8, 3, padding=1, groups=8), torch.nn.BatchNorm2d(8),
                             torch.nn.ReLU6(), torch.nn.Conv2d(8, 16, 1), torch.nn.AdaptiveAvgPool2d(1),
                             torch.nn.Flatten(), torch.nn.Linear(16, 5)])
    vit = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64, image_size=16,
               patch_size=4, num_channels=3, hidden_dropout_prob=0, attention_probs_dropout_prob=0)
    bart = t.BartConfig(vocab_size=64, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=32,
                        dropout=0, attention_dropout=0, activation_dropout=0, pad_token_id=0, bos_token_id=1,
                        eos_token_id=2, decoder_start_token_id=2)
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[0, 5:] = 0
    return {
        "deit": (lambda: t.DeiTModel(t.DeiTConfig(**vit)).eval(), (img,), "forward",
                 lambda o: o.last_hidden_state),
        "convnext": (lambda: t.ConvNextModel(t.ConvNextConfig(num_channels=3, hidden_sizes=[8, 16], depths=[1, 1], num_stages=2,
                                                                patch_size=2, image_size=16)).eval(), (img,),
                     "forward", lambda o: o.pooler_output),
        "mobilenet": (mobilenet, (img,), "forward", lambda o: o),
        "unet_bilinear": (lambda: UNet().eval(), (torch.randn(1, 3, 8, 8),), "forward", lambda o: o),
        "bart": (lambda: t.BartForConditionalGeneration(bart).eval(), (ids, mask, ids[:, :5]), "forward",
                 lambda o: o.logits),
        "clip_vision": (lambda: t.CLIPVisionModel(t.CLIPVisionConfig(hidden_size=32, intermediate_size=64,
                                                                      num_hidden_layers=1, num_attention_heads=4,
                                                                      image_size=16, patch_size=4)).eval(),
                        (img,), "forward", lambda o: o.pooler_output),
        "distilbert_mask": (lambda: t.DistilBertModel(t.DistilBertConfig(vocab_size=64, dim=32, n_layers=1, n_heads=4,
                                                                         hidden_dim=64, max_position_embeddings=32)
                                                      ).eval(), (ids, mask), "forward",
                            lambda o: o.last_hidden_state),
        "qwen2_moe": (lambda: t.Qwen2MoeForCausalLM(t.Qwen2MoeConfig(**lm, num_key_value_heads=2, num_experts=4,
                                                                     num_experts_per_tok=2, moe_intermediate_size=32,
                                                                     shared_expert_intermediate_size=32,
                                                                     use_cache=False)).eval(), (ids,), "forward",
                      lambda o: o.logits),
        "bilstm": (lambda: BiLSTM().eval(), (ids,), "forward", lambda o: o),
        "mistral_generate": (lambda: t.MistralForCausalLM(t.MistralConfig(**lm, num_key_value_heads=2)).eval(),
                             (one,), "generate", None),
        "gpt_neox_generate": (lambda: t.GPTNeoXForCausalLM(t.GPTNeoXConfig(**lm)).eval(), (one,), "generate",
                              None),
        "mamba": (lambda: t.MambaForCausalLM(t.MambaConfig(vocab_size=64, hidden_size=16, state_size=4,
                                                           num_hidden_layers=1, expand=2, conv_kernel=4,
                                                           use_cache=False)).eval(), (ids,), "forward",
                  lambda o: o.logits),
        "deit_train": (lambda: Loss(t.DeiTForImageClassification(t.DeiTConfig(**vit, num_labels=3)).train()),
                       (img, torch.tensor([0, 2])), "train", lambda o: o),
        "convnext_train": (lambda: Loss(t.ConvNextForImageClassification(t.ConvNextConfig(
            num_channels=3, hidden_sizes=[8, 16], depths=[1, 1], num_stages=2, patch_size=2, image_size=16,
            num_labels=3)).train()), (img, torch.tensor([1, 2])), "train", lambda o: o),
        "hf_resnet_train": (lambda: Loss(t.ResNetForImageClassification(t.ResNetConfig(
            num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic",
            num_labels=3)).train()), (img, torch.tensor([1, 0])), "train", lambda o: o),
        "bart_train": (lambda: Loss(t.BartForConditionalGeneration(bart).train(), "input_ids", "attention_mask",
                                    "labels"), (ids, mask, ids[:, :5].contiguous()), "train", lambda o: o),
        "mistral_train": (lambda: Loss(t.MistralForCausalLM(t.MistralConfig(**lm, num_key_value_heads=2,
                                                                            use_cache=False)).train(),
                                       "input_ids", "labels"), (ids, ids), "train", lambda o: o),
    }


def main(names):
    table = models()
    failed = []
    all_fallbacks: dict = {}
    for name in names or list(table):
        make, inputs, kind, out = table[name]
        start = be.MADE[0]
        t0 = time.thread_time()
        try:
            with torch._dynamo.config.patch(allow_rnn=True):
                ok = check(make, inputs, kind, out or (lambda o: o))
        except Exception as e:  # noqa: BLE001 - a report of every model, whatever happens
            ok = f"error {type(e).__name__}: {str(e).splitlines()[0][:200]}"
            if "-v" in sys.argv:
                import traceback
                traceback.print_exc()
        s = D.stats()
        fb = _reasons(start)
        for region, why in s["runtime_reasons"].items():
            fb.update({op: f"{region} ran eagerly at run time: {why}" for op in s["fallback_ops"] if op not in fb})
        all_fallbacks.update({k: (name, v) for k, v in fb.items()})
        print(f"{name:18s} {kind:8s} match={ok} launches={s['launches']} simulated={s['simulated_us']:.1f}us "
              f"eager_fallbacks={s['eager_fallback_us']:.0f}us cpu={time.thread_time() - t0:.1f}s "
              f"fallbacks={s['fallback_ops'] or {}}", flush=True)
        for k, v in fb.items():
            print(f"    {k}: {v}", flush=True)
        if ok is not True:
            failed.append(name)
    print(f"\n{len(names or table) - len(failed)} of {len(names or table)} match eager; distinct aten ops that "
          f"fell back: {len(all_fallbacks)} {sorted(all_fallbacks)}")


if __name__ == "__main__":
    main([a for a in sys.argv[1:] if a != "-v"])
