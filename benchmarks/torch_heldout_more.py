"""A second held-out set: 42 small random-init transformers models that no test, example or other benchmark here
uses (picked on 2026-12-07 from transformers' model families, not from anything that failed), forward under
``torch.compile(model, backend="dvmlang")`` against eager: whether each matches, the aten ops that fell back
with their reasons, launches.

    python benchmarks/torch_heldout_more.py [NAME ...] [-v]

Offline: transformers configs, random weights, no downloads. The result when the set was picked (before the fixes
it led to): 42 of 42 matched eager, 10 ran in part or whole eagerly (rank-5/6 views and cats, a regrouping view,
``pow.Scalar``, ``as_strided``, ``clamp.Tensor``, pooling variants, ``index_put`` of a broadcast value, FNet's complex
FFT). Now: 42 of 42 match, FNet alone falls back (dvmlang has no complex dtype)."""

from __future__ import annotations

import sys
import time

import torch

import torch_heldout as H

import dvmlang.torch as D


class _Seq2Seq(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, a, b):
        return self.m(input_ids=a, decoder_input_ids=b)


def models() -> dict:
    import transformers as t
    torch.manual_seed(0)
    lm = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
              max_position_embeddings=64)
    enc = dict(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
               max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    s2s = dict(vocab_size=64, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
               decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
               dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, pad_token_id=0, decoder_start_token_id=2)
    audio = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64, conv_dim=(16, 16),
                 conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
    ids = torch.randint(3, 64, (2, 9))
    img = torch.randn(2, 3, 32, 32)
    wav = torch.randn(2, 400)
    logits = lambda o: o.logits  # noqa: E731
    hidden = lambda o: o.last_hidden_state  # noqa: E731

    def causal(cls, cfg):
        return (lambda: cls(cfg).eval(), (ids,), logits)

    def encoder(cls, cfg, x=ids):
        return (lambda: cls(cfg).eval(), (x,), hidden)

    def seq2seq(cls, cfg):
        return (lambda: _Seq2Seq(cls(cfg)).eval(), (ids, ids), hidden)

    return {
        "phi3": causal(t.Phi3ForCausalLM, t.Phi3Config(**lm, num_key_value_heads=2, pad_token_id=0)),
        "gemma2": causal(t.Gemma2ForCausalLM, t.Gemma2Config(**lm, num_key_value_heads=2, head_dim=8)),
        "falcon": causal(t.FalconForCausalLM, t.FalconConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1,
                                                             num_attention_heads=4)),
        "opt": causal(t.OPTForCausalLM, t.OPTConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, ffn_dim=64,
                                                    num_attention_heads=4, max_position_embeddings=64,
                                                    word_embed_proj_dim=32)),
        "bloom": causal(t.BloomForCausalLM, t.BloomConfig(vocab_size=64, hidden_size=32, n_layer=1, n_head=4)),
        "gpt_bigcode": causal(t.GPTBigCodeForCausalLM, t.GPTBigCodeConfig(vocab_size=64, n_embd=32, n_layer=1,
                                                                          n_head=4, n_positions=64, multi_query=True)),
        "stablelm": causal(t.StableLmForCausalLM, t.StableLmConfig(**lm, num_key_value_heads=4,
                                                                   partial_rotary_factor=0.5)),
        "gptj": causal(t.GPTJForCausalLM, t.GPTJConfig(vocab_size=64, n_embd=32, n_layer=1, n_head=4, rotary_dim=4,
                                                       n_positions=64)),
        "codegen": causal(t.CodeGenForCausalLM, t.CodeGenConfig(vocab_size=64, n_embd=32, n_layer=1, n_head=4,
                                                                rotary_dim=4, n_positions=64, n_ctx=64)),
        "olmo": causal(t.OlmoForCausalLM, t.OlmoConfig(**lm, num_key_value_heads=4)),
        "cohere": causal(t.CohereForCausalLM, t.CohereConfig(**lm, num_key_value_heads=4)),
        "granite": causal(t.GraniteForCausalLM, t.GraniteConfig(**lm, num_key_value_heads=4)),
        "starcoder2": causal(t.Starcoder2ForCausalLM, t.Starcoder2Config(**lm, num_key_value_heads=4)),
        "nemotron": causal(t.NemotronForCausalLM, t.NemotronConfig(**lm, num_key_value_heads=4, head_dim=8)),
        "phimoe": causal(t.PhimoeForCausalLM, t.PhimoeConfig(**lm, num_key_value_heads=4, num_local_experts=4,
                                                             num_experts_per_tok=2)),
        "mamba2": causal(t.Mamba2ForCausalLM, t.Mamba2Config(vocab_size=64, hidden_size=32, state_size=8,
                                                             num_heads=4, head_dim=16, n_groups=1, num_hidden_layers=1,
                                                             expand=2, chunk_size=4)),
        "rwkv": causal(t.RwkvForCausalLM, t.RwkvConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                                                       attention_hidden_size=32, intermediate_size=64,
                                                       context_length=64)),
        "xlnet": encoder(t.XLNetModel, t.XLNetConfig(vocab_size=64, d_model=32, n_layer=1, n_head=4, d_inner=64)),
        "roberta": encoder(t.RobertaModel, t.RobertaConfig(**enc)),
        "albert": encoder(t.AlbertModel, t.AlbertConfig(**enc, embedding_size=16)),
        "electra": encoder(t.ElectraModel, t.ElectraConfig(**enc, embedding_size=16)),
        "deberta_v2": encoder(t.DebertaV2Model, t.DebertaV2Config(**enc, relative_attention=True, position_buckets=8,
                                                                  pos_att_type=["p2c", "c2p"])),
        "mpnet": encoder(t.MPNetModel, t.MPNetConfig(**enc)),
        "funnel": encoder(t.FunnelModel, t.FunnelConfig(vocab_size=64, d_model=32, n_head=4, d_head=8, d_inner=64,
                                                        block_sizes=[1, 1], hidden_dropout=0.0, attention_dropout=0.0,
                                                        activation_dropout=0.0)),
        "squeezebert": encoder(t.SqueezeBertModel, t.SqueezeBertConfig(**enc, embedding_size=32, q_groups=2,
                                                                       k_groups=2, v_groups=2, post_attention_groups=2,
                                                                       intermediate_groups=2, output_groups=2)),
        "convbert": encoder(t.ConvBertModel, t.ConvBertConfig(**enc, embedding_size=32)),
        "canine": encoder(t.CanineModel, t.CanineConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                                        intermediate_size=64, downsampling_rate=2,
                                                        num_hash_functions=2, num_hash_buckets=64,
                                                        local_transformer_stride=4), ids * 7),
        "fnet": encoder(t.FNetModel, t.FNetConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1,
                                                  intermediate_size=64)),
        "pegasus": seq2seq(t.PegasusModel, t.PegasusConfig(**s2s)),
        "marian": seq2seq(t.MarianModel, t.MarianConfig(**s2s)),
        "m2m100": seq2seq(t.M2M100Model, t.M2M100Config(**s2s)),
        "wav2vec2": encoder(t.Wav2Vec2Model, t.Wav2Vec2Config(**audio), wav),
        "hubert": encoder(t.HubertModel, t.HubertConfig(**audio), wav),
        "w2v2_conformer": encoder(t.Wav2Vec2ConformerModel, t.Wav2Vec2ConformerConfig(
            **audio, conv_depthwise_kernel_size=3, position_embeddings_type="rotary"), wav),
        "speech2text": (lambda: t.Speech2TextModel(t.Speech2TextConfig(
            vocab_size=64, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=64,
            max_target_positions=64, conv_channels=16, input_feat_per_channel=8, num_conv_layers=2,
            dropout=0.0)).eval(), (torch.randn(2, 20, 8), torch.ones(2, 20, dtype=torch.long), ids), hidden),
        "swin": encoder(t.SwinModel, t.SwinConfig(image_size=32, patch_size=4, num_channels=3, embed_dim=16,
                                                  depths=[1, 1], num_heads=[2, 4], window_size=4), img),
        "segformer": encoder(t.SegformerModel, t.SegformerConfig(num_channels=3, num_encoder_blocks=2, depths=[1, 1],
                                                                 sr_ratios=[2, 1], hidden_sizes=[8, 16],
                                                                 patch_sizes=[7, 3], strides=[4, 2],
                                                                 num_attention_heads=[1, 2], mlp_ratios=[2, 2]), img),
        "dinov2": encoder(t.Dinov2Model, t.Dinov2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                                        mlp_ratio=2, image_size=32, patch_size=8), img),
        "mobilevit": encoder(t.MobileViTModel, t.MobileViTConfig(image_size=32, num_channels=3,
                                                                 hidden_sizes=[16, 16, 16],
                                                                 neck_hidden_sizes=[8, 8, 16, 16, 16, 16, 32]), img),
        "beit": encoder(t.BeitModel, t.BeitConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                                  intermediate_size=64, image_size=32, patch_size=8,
                                                  use_relative_position_bias=True), img),
        "levit": encoder(t.LevitModel, t.LevitConfig(image_size=32, hidden_sizes=[16, 32, 48],
                                                     num_attention_heads=[1, 2, 3], depths=[1, 1, 1],
                                                     key_dim=[8, 8, 8], patch_size=16, stride=2), img),
        "poolformer": encoder(t.PoolFormerModel, t.PoolFormerConfig(num_channels=3, hidden_sizes=[8, 16],
                                                                    depths=[1, 1], num_encoder_blocks=2,
                                                                    patch_sizes=[7, 3], strides=[4, 2],
                                                                    padding=[2, 1]), img),
    }


def main(names) -> int:
    table = models()
    bad, fell = [], {}
    for name in names or list(table):
        make, inputs, out = table[name]
        start = H.be.MADE[0]
        t0 = time.thread_time()
        try:
            ok = H.check(make, inputs, "forward", out)
        except Exception as e:  # noqa: BLE001 - a report of every model, whatever happens
            ok = f"error {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            if "-v" in sys.argv:
                import traceback
                traceback.print_exc()
        s = D.stats()
        reasons = H._reasons(start)
        for region, why in s["runtime_reasons"].items():
            reasons.update({op: f"{region} ran eagerly at run time: {why}" for op in s["fallback_ops"]
                            if op not in reasons})
        print(f"{name:15s} match={ok} launches={s['launches']} cpu={time.thread_time() - t0:.1f}s "
              f"fallbacks={s['fallback_ops'] or {}}", flush=True)
        for k, v in reasons.items():
            print(f"    {k}: {v}", flush=True)
        if s["fallback_ops"]:
            fell[name] = s["fallback_ops"]
        if ok is not True:
            bad.append(name)
    n = len(names or table)
    print(f"\n{n - len(bad)} of {n} match eager; {n - len(fell)} with no fallback "
          f"(fell back in part: {', '.join(fell) or 'none'})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main([a for a in sys.argv[1:] if a != "-v"]))
