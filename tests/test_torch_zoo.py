"""A model zoo through torch.compile(backend="dvmlang"): small, random-init, offline models of the families users
bring (vision transformer and ConvNet, encoder-decoder, speech encoder, MoE decoder, recurrent net, attention
with a padding mask, generation with a KV cache) and training steps (ViT, a ResNet with BatchNorm in train mode,
an encoder-decoder). Each matches torch eager (forward; gradients and buffers where it trains) with no fallback:
every aten op of every graph runs on the simulated NPU."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

import dvmlang.torch as D  # noqa: E402

RTOL, ATOL = 1e-3, 1e-4


def _twins(make):
    torch.manual_seed(0)
    a = make()
    b = make()
    b.load_state_dict(a.state_dict())
    return a, b


def _no_fallbacks():
    s = D.stats()
    assert s["fallback_ops"] == {} and s["runtime_fallbacks"] == 0, (s["fallback_ops"], s["runtime_reasons"])
    assert s["launches"] >= 1
    return s


def _forward(make, *inputs, out=lambda o: o, dynamic=False):
    m, ref = _twins(make)
    torch._dynamo.reset()
    D.reset_stats()
    with torch.no_grad():
        got = out(torch.compile(m, backend="dvmlang", dynamic=dynamic)(*inputs))
        want = out(ref(*inputs))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=RTOL, atol=ATOL)
    return _no_fallbacks()


def _train(make, *inputs, loss=lambda o: o):
    m, ref = _twins(make)
    torch._dynamo.reset()
    D.reset_stats()
    got = loss(torch.compile(m, backend="dvmlang")(*inputs))
    want = loss(ref(*inputs))
    np.testing.assert_allclose(got.item(), want.item(), rtol=RTOL)
    got.backward()
    want.backward()
    for (name, p), q in zip(m.named_parameters(), ref.parameters()):
        if q.grad is not None:
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=RTOL, atol=ATOL, err_msg=name)
    for (name, b), c in zip(m.named_buffers(), ref.buffers()):
        np.testing.assert_allclose(b.numpy(), c.numpy(), rtol=RTOL, atol=ATOL, err_msg=name)
    return _no_fallbacks()


def _vit_config(**kw):
    return T.ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
                       image_size=16, patch_size=4, num_channels=3, hidden_dropout_prob=0,
                       attention_probs_dropout_prob=0, **kw)


def _t5_config():
    return T.T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4, dropout_rate=0,
                      decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)


class _Recurrent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 16, batch_first=True)
        self.gru = torch.nn.GRU(16, 8, batch_first=True)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.gru(self.lstm(x)[0])[0][:, -1])


def _whisper_encoder():
    from transformers.models.whisper.modeling_whisper import WhisperEncoder
    cfg = T.WhisperConfig(vocab_size=64, num_mel_bins=8, encoder_layers=1, d_model=32, encoder_attention_heads=4,
                          encoder_ffn_dim=64, max_source_positions=8, pad_token_id=0, bos_token_id=1,
                          eos_token_id=1, decoder_start_token_id=1)
    return WhisperEncoder(cfg).eval()


def _mixtral():
    cfg = T.MixtralConfig(vocab_size=64, hidden_size=32, intermediate_size=32, num_hidden_layers=1,
                          num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                          max_position_embeddings=64, use_cache=False)
    return T.MixtralForCausalLM(cfg).eval()


def _bert_inputs():
    ids = torch.randint(0, 64, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0
    return ids, mask


def _bert():
    cfg = T.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                       intermediate_size=64, max_position_embeddings=32)
    return T.BertModel(cfg).eval()


# name -> (a function making the model, a function making its inputs, what to compare of its output); the
# benchmark of steady calls (benchmarks/model_speed.py) runs them too
FORWARD = {
    "vision_transformer": (lambda: T.ViTModel(_vit_config()).eval(), lambda: (torch.randn(2, 3, 16, 16),),
                           lambda o: o.last_hidden_state),
    "convnet": (lambda: torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8), torch.nn.Conv2d(8, 8, 1), torch.nn.GELU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4)).eval(),
        lambda: (torch.randn(2, 3, 16, 16),), lambda o: o),
    "encoder_decoder": (lambda: T.T5ForConditionalGeneration(_t5_config()).eval(),
                        lambda: (torch.randint(2, 64, (2, 7)), None, torch.randint(2, 64, (2, 5))),
                        lambda o: o.logits),
    "speech_encoder": (_whisper_encoder, lambda: (torch.randn(2, 8, 16),), lambda o: o.last_hidden_state),
    "moe_decoder": (_mixtral, lambda: (torch.randint(0, 64, (2, 9)),), lambda o: o.logits),
    "recurrent_net": (_Recurrent, lambda: (torch.randn(2, 5, 8),), lambda o: o),  # (dynamo: allow_rnn)
    "attention_with_a_padding_mask": (_bert, _bert_inputs, lambda o: o.last_hidden_state),
}


@pytest.mark.parametrize("name", list(FORWARD))
def test_forward(name):
    make, inputs, out = FORWARD[name]
    torch.manual_seed(0)
    args = inputs()
    with torch._dynamo.config.patch(allow_rnn=True):  # without it dynamo leaves recurrent modules to eager
        _forward(make, *args, out=out)


def test_generate_with_a_kv_cache_decode_step_no_costlier_than_prefill():
    cfg = T.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    m = T.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 64, (1, 6))
    with torch.no_grad():
        want = m.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=0)
        fwd = m.forward
        m.forward = torch.compile(fwd, backend="dvmlang", dynamic=True)
        torch._dynamo.reset()
        D.reset_stats()
        got = m.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=0)
        assert torch.equal(got, want)
        _no_fallbacks()
        cache = T.DynamicCache()
        before = D.stats()
        out = m(ids, past_key_values=cache, use_cache=True)
        prefill = D.stats()
        m(out.logits[:, -1:].argmax(-1), past_key_values=cache, use_cache=True)
        decode = D.stats()
    _no_fallbacks()
    launches = (prefill["launches"] - before["launches"], decode["launches"] - prefill["launches"])
    sim = (prefill["simulated_us"] - before["simulated_us"], decode["simulated_us"] - prefill["simulated_us"])
    print("prefill / decode launches", launches, "simulated us", sim)
    assert launches[1] <= launches[0] and sim[1] <= sim[0]


def test_vit_training_step():
    _train(lambda: T.ViTForImageClassification(_vit_config(num_labels=3)).train(), torch.randn(2, 3, 16, 16),
           torch.tensor([0, 2]), loss=lambda o: o.loss)


def test_resnet_with_batch_norm_in_train_mode():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.b1 = torch.nn.Conv2d(4, 4, 3, padding=1, bias=False), torch.nn.BatchNorm2d(4)
            self.c2, self.b2 = torch.nn.Conv2d(4, 8, 3, padding=1, stride=2, bias=False), torch.nn.BatchNorm2d(8)
            self.short = torch.nn.Conv2d(4, 8, 1, stride=2)

        def forward(self, x):
            return torch.relu(self.b2(self.c2(torch.relu(self.b1(self.c1(x))))) + self.short(x))
    make = lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), Block(),  # noqa: E731
                                       torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                       torch.nn.Linear(8, 3)).train()
    target = torch.tensor([1, 2])
    _train(make, torch.randn(2, 3, 8, 8), loss=lambda o: torch.nn.functional.cross_entropy(o, target))


def test_encoder_decoder_training_step():
    class Seq2Seq(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = T.T5ForConditionalGeneration(_t5_config()).train()

        def forward(self, ids, labels):
            return self.m(input_ids=ids, labels=labels).loss
    _train(Seq2Seq, torch.randint(2, 64, (2, 7)), torch.randint(2, 64, (2, 5)))


def _decoders():
    return {
        "llama": lambda: T.LlamaForCausalLM(T.LlamaConfig(
            vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, use_cache=False)),
        "gpt2": lambda: T.GPT2LMHeadModel(T.GPT2Config(
            vocab_size=64, n_positions=32, n_embd=32, n_layer=1, n_head=4, use_cache=False, bos_token_id=0,
            eos_token_id=0, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)),
    }


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_decoder_training_with_dynamic_shapes_and_lazy_mode_without_fallback(family):
    """Training graphs with symbolic batch and length (grouped-query attention's rank-5 backward, a loss whose
    labels torch sizes with other symbols than its logits), then the same model in lazy mode."""
    import dvmlang.torch as dvt
    make = _decoders()[family]
    m, ref = _twins(lambda: make().train())
    torch._dynamo.reset()
    D.reset_stats()
    c = torch.compile(m, backend="dvmlang", dynamic=True)
    ids = torch.randint(0, 64, (2, 9))
    got, want = c(input_ids=ids, labels=ids).loss, ref(input_ids=ids, labels=ids).loss
    np.testing.assert_allclose(got.item(), want.item(), rtol=RTOL)
    got.backward()
    want.backward()
    for (name, p), q in zip(m.named_parameters(), ref.parameters()):
        if q.grad is not None:
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=RTOL, atol=1e-5, err_msg=name)
    _no_fallbacks()
    ref.eval()
    D.reset_stats()
    with torch.no_grad():
        want = ref(ids).logits
        with dvt.lazy():
            got = ref(ids).logits.numpy().copy()
    np.testing.assert_allclose(got, want.numpy(), rtol=RTOL, atol=ATOL)
    _no_fallbacks()
