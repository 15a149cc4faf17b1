"""Workload layer, model profiles: each model's parameter tensors in registration order and the forward FLOPs
of the layer that owns them, built from the published architectures (no weights needed).

A layer's share of backward time is its share of forward FLOPs (backward costs about twice the forward of the
same layer). ``--params N`` builds a synthetic model of 12 equal layers.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layer:
    name: str
    tensors: tuple[int, ...]  # parameter counts of the tensors this layer registers, in order
    flops: float  # forward FLOPs per sample


@dataclass(frozen=True)
class ModelProfile:
    name: str
    family: str  # "cnn" or "transformer": which achieved FLOP rate of a GPU applies (sim/presets/gpus.toml)
    layers: tuple[Layer, ...]
    tokens: int = 1  # tokens per sample its FLOPs count (1: a per-sample model, such as a CNN on one image)
    tokens_source: str = ""  # where that figure comes from

    @property
    def n_params(self) -> int:
        return sum(sum(layer.tensors) for layer in self.layers)

    @property
    def tensors(self) -> tuple[int, ...]:
        """Every tensor's parameter count in creation (forward) order."""
        return tuple(t for layer in self.layers for t in layer.tensors)

    @property
    def forward_flops(self) -> float:
        return sum(layer.flops for layer in self.layers)


def resnet(name: str, blocks: tuple[int, int, int, int]) -> ModelProfile:
    """torchvision ResNet v1.5 (He et al. 2016; stride on the 3x3 conv) with ``blocks`` bottlenecks per stage,
    224x224: ResNet-50 (3, 4, 6, 3) 25,557,032 parameters; ResNet-101 (3, 4, 23, 3) 44,549,160; ResNet-152
    (3, 8, 36, 3) 60,192,808 (torchvision's model summaries)."""
    layers: list[Layer] = []

    def conv(name: str, cin: int, cout: int, k: int, out_hw: int) -> None:
        macs = k * k * cin * cout * out_hw * out_hw
        layers.append(Layer(name, (k * k * cin * cout, cout, cout), 2.0 * macs))  # conv weight, bn weight, bn bias

    conv("conv1", 3, 64, 7, 112)
    inplanes, hw = 64, 56
    for stage, (width, n_blocks, stride) in enumerate(zip((64, 128, 256, 512), blocks, (1, 2, 2, 2), strict=True),
                                                      start=1):
        for b in range(n_blocks):
            s = stride if b == 0 else 1
            out_hw = hw // s
            prefix = f"layer{stage}.{b}"
            conv(f"{prefix}.conv1", inplanes, width, 1, hw)
            conv(f"{prefix}.conv2", width, width, 3, out_hw)
            conv(f"{prefix}.conv3", width, 4 * width, 1, out_hw)
            if b == 0:
                conv(f"{prefix}.downsample", inplanes, 4 * width, 1, out_hw)
            inplanes, hw = 4 * width, out_hw
    layers.append(Layer("fc", (2048 * 1000, 1000), 2.0 * 2048 * 1000))
    return ModelProfile(name, "cnn", tuple(layers), 1, "one 224x224 image per sample (He et al. 2016)")


def vgg16() -> ModelProfile:
    """VGG-16 (Simonyan & Zisserman 2015, configuration D) as torchvision builds it, 224x224: 13 3x3
    convolutions and three fully connected layers, 138,357,544 parameters."""
    layers: list[Layer] = []
    cin, hw = 3, 224
    for i, cout in enumerate((64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0)):
        if cout == 0:  # 2x2 max pooling
            hw //= 2
            continue
        layers.append(Layer(f"features.{i}", (9 * cin * cout, cout), 2.0 * 9 * cin * cout * hw * hw))
        cin = cout
    for i, (fin, fout) in enumerate(((512 * 7 * 7, 4096), (4096, 4096), (4096, 1000))):
        layers.append(Layer(f"classifier.{i}", (fin * fout, fout), 2.0 * fin * fout))
    return ModelProfile("vgg16", "cnn", tuple(layers), 1, "one 224x224 image per sample (Simonyan & Zisserman 2015)")


def _transformer_blocks(prefix: str, hidden: int, ffn: int, n_layers: int, tokens: int) -> list[Layer]:
    """Pre- or post-LN encoder blocks alike: Q, K, V, O projections, two LayerNorms, a two-layer MLP."""
    h, blocks = hidden, []
    for i in range(n_layers):
        linear = 4 * h * h + 2 * h * ffn
        attention = 2 * 2 * tokens * h  # scores QK^T and their product with V, per token
        tensors = (h * h, h, h * h, h, h * h, h, h * h, h, h, h, h * ffn, ffn, ffn * h, h, h, h)
        blocks.append(Layer(f"{prefix}.{i}", tensors, tokens * (2.0 * linear + attention)))
    return blocks


def bert(name: str, hidden: int, n_layers: int, tokens: int = 384, vocab: int = 30522) -> ModelProfile:
    """BERT (Devlin et al. 2019) for SQuAD question answering as HuggingFace builds it (no pooler, 2-way head);
    384-token sequences as in the Birder paper's fine-tuning."""
    h = hidden
    layers = [Layer("embeddings", (vocab * h, 512 * h, 2 * h, h, h), 0.0)]
    layers += _transformer_blocks("encoder", h, 4 * h, n_layers, tokens)
    layers.append(Layer("qa_outputs", (2 * h, 2), tokens * 2.0 * 2 * h))
    return ModelProfile(name, "transformer", tuple(layers), tokens,
                        f"{tokens}-token SQuAD sequences, as the Birder paper's fine-tuning")


def bert_pretraining(name: str, hidden: int, n_layers: int, tokens: int, vocab: int = 30522) -> ModelProfile:
    """BERT pre-training (Devlin et al. 2019) as Google's and NVIDIA's scripts build it: the encoder with its
    pooler, the masked-LM head (a dense layer, a LayerNorm, an output bias; its weight tied to the word
    embedding) and the 2-way next-sentence head; ``tokens`` per sequence (128 in phase 1, 512 in phase 2).
    BERT-Large: 336,226,108 parameters (the paper's "340M"); BERT-Base: 110,106,428 ("110M")."""
    h = hidden
    layers = [Layer("embeddings", (vocab * h, 512 * h, 2 * h, h, h), 0.0)]
    layers += _transformer_blocks("encoder", h, 4 * h, n_layers, tokens)
    layers.append(Layer("pooler", (h * h, h), 2.0 * h * h))
    layers.append(Layer("mlm_head", (h * h, h, h, h, vocab), tokens * 2.0 * (h * h + h * vocab)))
    layers.append(Layer("nsp_head", (2 * h, 2), 2.0 * 2 * h))
    return ModelProfile(name, "transformer", tuple(layers), tokens,
                        f"{tokens}-token sequences of BERT pre-training's phase {1 if tokens == 128 else 2} "
                        "(Devlin et al. 2019)")


def gpt2(tokens: int = 1024) -> ModelProfile:
    """GPT-2 small (Radford et al. 2019): 12 layers of 768, 1024-token context, LM head tied to the embedding."""
    h, vocab = 768, 50257
    layers = [Layer("wte_wpe", (vocab * h, 1024 * h), 0.0)]
    layers += _transformer_blocks("h", h, 4 * h, 12, tokens)
    layers.append(Layer("ln_f_lm_head", (h, h), tokens * 2.0 * h * vocab))
    return ModelProfile("gpt2", "transformer", tuple(layers), tokens,
                        f"{tokens}-token context (Radford et al. 2019)")


def vit_b16(tokens: int = 197) -> ModelProfile:
    """ViT-B/16 (Dosovitskiy et al. 2021): 16x16 patches of 224x224 images (196 + class token), 1000 classes."""
    h = 768
    layers = [Layer("patch_embed", (16 * 16 * 3 * h, h, h, tokens * h), 196 * 2.0 * 16 * 16 * 3 * h)]
    layers += _transformer_blocks("blocks", h, 4 * h, 12, tokens)
    layers.append(Layer("head", (h, h, h * 1000, 1000), 2.0 * h * 1000))
    return ModelProfile("vit-b16", "transformer", tuple(layers), tokens,
                        f"{tokens} tokens: 196 patches of 16x16 and the class token (Dosovitskiy et al. 2021)")


def synthetic(n_params: int, n_layers: int = 12, tokens: int = 1) -> ModelProfile:
    """``--params N --seq-len L``: N parameters in n_layers equal layers, 6 FLOPs per parameter per token of
    training (2 forward, 4 backward; Kaplan et al. 2020, C = 6 N D), L tokens per sample (1: a per-sample model)."""
    if int(n_params) < n_layers:
        raise ValueError(f"--params must be at least {n_layers}, got {n_params}")
    per, rest = divmod(int(n_params), n_layers)
    sizes = [per + (1 if i < rest else 0) for i in range(n_layers)]
    return ModelProfile(f"params-{n_params}", "transformer",
                        tuple(Layer(f"layer{i}", (s,), 2.0 * s * tokens) for i, s in enumerate(sizes)), tokens,
                        f"--seq-len {tokens}")


MODELS = {
    "resnet50": lambda: resnet("resnet50", (3, 4, 6, 3)),
    "resnet101": lambda: resnet("resnet101", (3, 4, 23, 3)),
    "resnet152": lambda: resnet("resnet152", (3, 8, 36, 3)),
    "vgg16": vgg16,
    "bert-base": lambda: bert("bert-base", 768, 12),
    "bert-large": lambda: bert("bert-large", 1024, 24),
    "bert-base-pretrain-seq128": lambda: bert_pretraining("bert-base-pretrain-seq128", 768, 12, 128),
    "bert-large-pretrain-seq128": lambda: bert_pretraining("bert-large-pretrain-seq128", 1024, 24, 128),
    "bert-large-pretrain-seq512": lambda: bert_pretraining("bert-large-pretrain-seq512", 1024, 24, 512),
    "gpt2": gpt2,
    "vit-b16": vit_b16,
}


def model_profile(name: str) -> ModelProfile:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)} or pass --params N")
    return MODELS[name]()
