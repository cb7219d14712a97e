#!/usr/bin/env python
"""Model zoo check: export real models with torch.export (default IR, no
run_decompositions()), compile each with aotc, run it, and compare with PyTorch.

    python benchmarks/zoo.py --aotc PATH --out DIR [--only REGEX] [--list]

Per model, DIR/<name>/ gets model.pt2, inputs_N.safetensors, model.so and
outputs_N.safetensors; DIR/results.json collects every model's status (models
run again replace their earlier entry; others are kept). Statuses:
export failed / compile failed / run failed / mismatch / pass.
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import time
import traceback

import torch
from torch.utils._pytree import tree_flatten

torch.set_num_threads(1)
import warnings  # noqa: E402
warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

RTOL, ATOL = 1e-3, 1e-4
COMPILE_TIMEOUT = 120
CORE_RETRY = False  # --core-retry
RUN_TIMEOUT = 120

Dim = torch.export.Dim


# --------------------------------------------------------------------------------------
# Model specs. A builder returns a dict:
#   model, args (tuple), kwargs (dict, optional), dynamic_shapes (optional),
#   args2/kwargs2 (a second call with another size on the dynamic dim, optional),
#   strict (bool, optional, default False)
# --------------------------------------------------------------------------------------

MODELS = []  # (name, family, builder)


def register(name, family):
    def deco(fn):
        MODELS.append((name, family, fn))
        return fn
    return deco


def seed():
    torch.manual_seed(0)


# ---- torchvision classification -------------------------------------------------------

def tv(name, size=64, batch2=True, **kw):
    batch2 = kw.pop("batch2", batch2)

    def build():
        import torchvision.models as tvm
        seed()
        m = getattr(tvm, name)(weights=None, **kw).eval()
        x = torch.randn(2, 3, size, size)
        spec = dict(model=m, args=(x,))
        if batch2:
            # dynamic batch: example batch 2, second call batch 3
            spec["dynamic_shapes"] = ({0: Dim("batch", min=1, max=16)},)
            spec["args2"] = (torch.randn(3, 3, size, size),)
        return spec
    return build


for _name, _size, _kw in [
    ("resnet18", 64, {}),
    ("resnet50", 64, {}),
    ("mobilenet_v2", 64, {}),
    ("mobilenet_v3_small", 64, {}),
    ("efficientnet_b0", 64, {}),
    ("shufflenet_v2_x0_5", 64, {}),
    ("squeezenet1_1", 64, {}),
    ("densenet121", 64, {}),
    ("regnet_y_400mf", 64, {}),
    ("mnasnet0_5", 64, {}),
    ("googlenet", 64, {"aux_logits": False, "init_weights": True}),
    ("convnext_tiny", 64, {}),
    ("swin_t", 64, {}),
    ("alexnet", 64, {}),
    ("vgg11", 64, {}),
    ("wide_resnet50_2", 64, {}),
    ("resnext50_32x4d", 64, {}),
    ("inception_v3", 96, {"aux_logits": False, "init_weights": True}),
    ("resnet34", 64, {}),
    ("mobilenet_v3_large", 64, {}),
    ("efficientnet_v2_s", 64, {}),
    ("regnet_x_400mf", 64, {}),
    ("shufflenet_v2_x1_0", 64, {}),
    ("squeezenet1_0", 64, {}),
    ("vgg11_bn", 64, {}),
    ("swin_v2_t", 64, {}),
    ("maxvit_t", 224, {"batch2": False}),
]:
    register("tv_" + _name, "torchvision")(tv(_name, _size, **_kw))


@register("tv_vit_b_16_small", "torchvision")
def _tv_vit():
    # a small ViT from torchvision's VisionTransformer class (vit_b_16 at 224 is slow)
    from torchvision.models.vision_transformer import VisionTransformer
    seed()
    m = VisionTransformer(image_size=64, patch_size=16, num_layers=2, num_heads=4,
                          hidden_dim=64, mlp_dim=128, num_classes=10).eval()
    x = torch.randn(2, 3, 64, 64)
    return dict(model=m, args=(x,), dynamic_shapes=({0: Dim("batch", min=1, max=16)},),
                args2=(torch.randn(3, 3, 64, 64),))


@register("tv_vit_b_16", "torchvision")
def _tv_vit_b_16():
    # the real vit_b_16 (86M parameters) at 224x224, batch 1, static
    import torchvision.models as tvm
    seed()
    m = tvm.vit_b_16(weights=None).eval()
    return dict(model=m, args=(torch.randn(1, 3, 224, 224),))


@register("tv_fcn_resnet50", "torchvision")
def _tv_fcn():
    import torchvision.models.segmentation as seg
    seed()
    m = seg.fcn_resnet50(weights=None, weights_backbone=None, num_classes=5, aux_loss=False).eval()
    return dict(model=m, args=(torch.randn(1, 3, 64, 64),))


@register("tv_deeplabv3_mobilenet_v3_large", "torchvision")
def _tv_deeplab():
    import torchvision.models.segmentation as seg
    seed()
    m = seg.deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=5,
                                         aux_loss=False).eval()
    return dict(model=m, args=(torch.randn(1, 3, 64, 64),))


@register("tv_lraspp_mobilenet_v3_large", "torchvision")
def _tv_lraspp():
    import torchvision.models.segmentation as seg
    seed()
    m = seg.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=5).eval()
    return dict(model=m, args=(torch.randn(1, 3, 64, 64),))


@register("tv_ssdlite320_mobilenet_v3_large", "torchvision")
def _tv_ssdlite():
    import torchvision.models.detection as det
    seed()
    m = det.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None,
                                          num_classes=5).eval()
    return dict(model=m, args=([torch.rand(3, 128, 128)],))


@register("tv_fasterrcnn_mobilenet_v3_large_320_fpn", "torchvision")
def _tv_frcnn():
    import torchvision.models.detection as det
    seed()
    m = det.fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None,
                                                  num_classes=5).eval()
    return dict(model=m, args=([torch.rand(3, 128, 128)],))


# ---- timm -----------------------------------------------------------------------------

def timm_model(name, size=64, **kw):
    def build():
        import timm
        seed()
        m = timm.create_model(name, pretrained=False, **kw).eval()
        x = torch.randn(1, 3, size, size)
        return dict(model=m, args=(x,))
    return build


for _name, _size, _kw in [
    ("resnet18", 64, {}),
    ("efficientnet_b0", 64, {}),
    ("mobilenetv3_small_100", 64, {}),
    ("mobilevit_xxs", 64, {}),
    ("convnext_atto", 64, {}),
    ("deit_tiny_patch16_224", 224, {"depth": 2}),
    ("levit_128s", 224, {}),
    ("regnetx_002", 64, {}),
    ("mixer_s32_224", 224, {}),
    ("poolformer_s12", 64, {}),
    ("ghostnet_100", 64, {}),
    ("dla34", 64, {}),
    ("cspresnet50", 64, {}),
    ("rexnet_100", 64, {}),
    ("efficientformer_l1", 224, {}),
    ("vit_tiny_patch16_224", 224, {"depth": 2}),
    ("coat_lite_tiny", 224, {}),
    ("resmlp_12_224", 224, {}),
    ("hrnet_w18_small", 64, {}),
    ("lcnet_050", 64, {}),
    ("efficientvit_b0", 64, {}),
    ("repvit_m1", 64, {}),
    ("fastvit_t8", 64, {}),
    ("edgenext_xx_small", 64, {}),
    ("mobileone_s0", 64, {}),
    ("pit_ti_224", 224, {}),
    ("xcit_nano_12_p16_224", 224, {}),
    ("cait_xxs24_224", 224, {}),
    ("swin_tiny_patch4_window7_224", 224, {}),
    ("nf_resnet26", 64, {}),
    ("ese_vovnet19b_dw", 64, {}),
    ("resnest14d", 64, {}),
    ("tinynet_e", 64, {}),
    ("crossvit_tiny_240", 240, {}),
    ("coatnet_nano_rw_224", 224, {}),
    ("mobilenetv4_conv_small", 64, {}),
    ("hgnetv2_b0", 64, {}),
    ("tiny_vit_5m_224", 224, {}),
    ("eva02_tiny_patch14_224", 224, {}),
    ("efficientformerv2_s0", 224, {}),
    ("convnextv2_atto", 64, {}),
    ("mobilevitv2_050", 64, {}),
    ("pvt_v2_b0", 224, {}),
    ("twins_svt_small", 224, {}),
    ("davit_tiny", 224, {}),
    ("focalnet_tiny_srf", 224, {}),
    ("inception_next_tiny", 64, {}),
    ("res2net50_14w_8s", 64, {}),
    ("gernet_s", 64, {}),
    ("starnet_s1", 64, {}),
]:
    register("timm_" + _name, "timm")(timm_model(_name, _size, **_kw))


# ---- Hugging Face transformers (tiny configs, random weights) -------------------------

def _seq_inputs(vocab, batch=1, seq=8, seq2=13, mask=True, seq_min=2):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    ids2 = torch.randint(0, vocab, (batch, seq2), generator=g)
    S = Dim("seq", min=seq_min, max=64)
    if mask:
        am = torch.ones(batch, seq, dtype=torch.long)
        am[0, -2:] = 0   # pad the tail so the mask matters
        am2 = torch.ones(batch, seq2, dtype=torch.long)
        am2[0, -3:] = 0
        return dict(args=(), kwargs=dict(input_ids=ids, attention_mask=am),
                    kwargs2=dict(input_ids=ids2, attention_mask=am2),
                    dynamic_shapes=dict(input_ids={1: S}, attention_mask={1: S}))
    return dict(args=(), kwargs=dict(input_ids=ids), kwargs2=dict(input_ids=ids2),
                dynamic_shapes=dict(input_ids={1: S}))


SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
             vocab_size=1000)


def hf(name, config_fn, model_cls, mask=True, seq_min=2, **extra):
    def build():
        import transformers
        seed()
        cfg = config_fn(transformers)
        cls = getattr(transformers, model_cls)
        m = cls(cfg).eval()
        spec = _seq_inputs(cfg.vocab_size, mask=mask, seq_min=seq_min)
        spec["model"] = m
        if extra.pop("labels", False):
            # encoder-decoder: decoder_input_ids of the same (dynamic) length
            for k in ("kwargs", "kwargs2"):
                spec[k]["decoder_input_ids"] = spec[k]["input_ids"].flip(-1).clone()
            spec["dynamic_shapes"]["decoder_input_ids"] = spec["dynamic_shapes"]["input_ids"]
        spec.update(extra)
        return spec
    return build


register("hf_bert", "transformers")(hf(
    "bert", lambda t: t.BertConfig(**SMALL, max_position_embeddings=128), "BertModel"))
register("hf_distilbert", "transformers")(hf(
    "distilbert", lambda t: t.DistilBertConfig(dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                                               vocab_size=1000, max_position_embeddings=128),
    "DistilBertModel"))
register("hf_roberta", "transformers")(hf(
    "roberta", lambda t: t.RobertaConfig(**SMALL, max_position_embeddings=130), "RobertaModel"))
register("hf_gpt2", "transformers")(hf(
    "gpt2", lambda t: t.GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=128,
                                   vocab_size=1000, use_cache=False), "GPT2LMHeadModel"))
register("hf_llama", "transformers")(hf(
    "llama", lambda t: t.LlamaConfig(**SMALL, num_key_value_heads=2, max_position_embeddings=128,
                                     use_cache=False), "LlamaForCausalLM"))
register("hf_mistral", "transformers")(hf(
    "mistral", lambda t: t.MistralConfig(**SMALL, num_key_value_heads=2,
                                         max_position_embeddings=128, use_cache=False),
    "MistralForCausalLM"))
register("hf_qwen2", "transformers")(hf(
    "qwen2", lambda t: t.Qwen2Config(**SMALL, num_key_value_heads=2, max_position_embeddings=128,
                                     use_cache=False), "Qwen2ForCausalLM"))
register("hf_t5_encoder", "transformers")(hf(
    "t5", lambda t: t.T5Config(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                               vocab_size=1000), "T5EncoderModel"))
register("hf_bart", "transformers")(hf(
    "bart", lambda t: t.BartConfig(d_model=64, encoder_layers=2, decoder_layers=2,
                                   encoder_attention_heads=4, decoder_attention_heads=4,
                                   encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=1000,
                                   max_position_embeddings=128, use_cache=False),
    "BartModel", seq_min=3))  # torch.export: BART guards seq >= 3
register("hf_albert", "transformers")(hf(
    "albert", lambda t: t.AlbertConfig(embedding_size=32, **SMALL, max_position_embeddings=128),
    "AlbertModel"))
register("hf_electra", "transformers")(hf(
    "electra", lambda t: t.ElectraConfig(embedding_size=32, **SMALL, max_position_embeddings=128),
    "ElectraModel"))
register("hf_phi", "transformers")(hf(
    "phi", lambda t: t.PhiConfig(**SMALL, max_position_embeddings=128, use_cache=False),
    "PhiForCausalLM"))
register("hf_gemma", "transformers")(hf(
    "gemma", lambda t: t.GemmaConfig(**SMALL, num_key_value_heads=2, head_dim=16,
                                     max_position_embeddings=128, use_cache=False),
    "GemmaForCausalLM"))


LM = dict(SMALL, max_position_embeddings=128, use_cache=False)
LMKV = dict(LM, num_key_value_heads=2)
register("hf_opt", "transformers")(hf(
    "opt", lambda t: t.OPTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                 ffn_dim=128, word_embed_proj_dim=64, vocab_size=1000,
                                 max_position_embeddings=128, use_cache=False, pad_token_id=1),
    "OPTForCausalLM"))
register("hf_gpt_neox", "transformers")(hf(
    "gpt_neox", lambda t: t.GPTNeoXConfig(**LM), "GPTNeoXForCausalLM"))
register("hf_falcon", "transformers")(hf(
    "falcon", lambda t: t.FalconConfig(hidden_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, vocab_size=1000, use_cache=False),
    "FalconForCausalLM"))
register("hf_bloom", "transformers")(hf(
    "bloom", lambda t: t.BloomConfig(hidden_size=64, n_layer=2, n_head=4, vocab_size=1000,
                                     use_cache=False), "BloomForCausalLM"))
register("hf_gptj", "transformers")(hf(
    "gptj", lambda t: t.GPTJConfig(n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=128,
                                   vocab_size=1000, use_cache=False), "GPTJForCausalLM"))
register("hf_codegen", "transformers")(hf(
    "codegen", lambda t: t.CodeGenConfig(n_embd=64, n_layer=2, n_head=4, rotary_dim=8,
                                         n_positions=128, n_ctx=128, vocab_size=1000,
                                         use_cache=False), "CodeGenForCausalLM"))
register("hf_gpt_bigcode", "transformers")(hf(
    "gpt_bigcode", lambda t: t.GPTBigCodeConfig(n_embd=64, n_layer=2, n_head=4, n_positions=128,
                                                vocab_size=1000, use_cache=False),
    "GPTBigCodeForCausalLM"))
register("hf_phi3", "transformers")(hf(
    "phi3", lambda t: t.Phi3Config(**LMKV, pad_token_id=0), "Phi3ForCausalLM"))
register("hf_qwen3", "transformers")(hf(
    "qwen3", lambda t: t.Qwen3Config(**LMKV, head_dim=16), "Qwen3ForCausalLM"))
register("hf_gemma2", "transformers")(hf(
    "gemma2", lambda t: t.Gemma2Config(**LMKV, head_dim=16, sliding_window=4),
    "Gemma2ForCausalLM"))
register("hf_stablelm", "transformers")(hf(
    "stablelm", lambda t: t.StableLmConfig(**LMKV), "StableLmForCausalLM"))
register("hf_olmo", "transformers")(hf(
    "olmo", lambda t: t.OlmoConfig(**LMKV, pad_token_id=0), "OlmoForCausalLM"))
register("hf_granite", "transformers")(hf(
    "granite", lambda t: t.GraniteConfig(**LMKV), "GraniteForCausalLM"))
register("hf_mixtral", "transformers")(hf(
    "mixtral", lambda t: t.MixtralConfig(**LMKV, num_local_experts=4, num_experts_per_tok=2),
    "MixtralForCausalLM"))
# the same with the experts run by plain torch code instead of transformers' custom op
register("hf_mixtral_eager_experts", "transformers")(hf(
    "mixtral", lambda t: t.MixtralConfig(**LMKV, num_local_experts=4, num_experts_per_tok=2,
                                         experts_implementation="eager"),
    "MixtralForCausalLM"))
register("hf_deberta_v2", "transformers")(hf(
    "deberta_v2", lambda t: t.DebertaV2Config(**SMALL, max_position_embeddings=128),
    "DebertaV2Model"))
register("hf_mobilebert", "transformers")(hf(
    "mobilebert", lambda t: t.MobileBertConfig(**dict(SMALL, intermediate_size=64),
                                               embedding_size=32, intra_bottleneck_size=32,
                                               true_hidden_size=32, num_feedforward_networks=2,
                                               max_position_embeddings=128), "MobileBertModel",
    seq_min=3))  # torch.export: MobileBERT guards seq != 2
register("hf_mpnet", "transformers")(hf(
    "mpnet", lambda t: t.MPNetConfig(**SMALL, max_position_embeddings=130), "MPNetModel"))
register("hf_xlm_roberta", "transformers")(hf(
    "xlm_roberta", lambda t: t.XLMRobertaConfig(**SMALL, max_position_embeddings=130),
    "XLMRobertaModel"))
register("hf_convbert", "transformers")(hf(
    "convbert", lambda t: t.ConvBertConfig(**SMALL, embedding_size=64,
                                           max_position_embeddings=128), "ConvBertModel"))
register("hf_squeezebert", "transformers")(hf(
    "squeezebert", lambda t: t.SqueezeBertConfig(**SMALL, embedding_size=64, q_groups=2,
                                                 k_groups=2, v_groups=2, post_attention_groups=2,
                                                 intermediate_groups=2, output_groups=2,
                                                 max_position_embeddings=128),
    "SqueezeBertModel"))
register("hf_modernbert", "transformers")(hf(
    "modernbert", lambda t: t.ModernBertConfig(**SMALL, max_position_embeddings=128,
                                               pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                               sep_token_id=3, cls_token_id=4),
    "ModernBertModel"))
register("hf_clip_text", "transformers")(hf(
    "clip_text", lambda t: t.CLIPTextConfig(**SMALL, max_position_embeddings=77,
                                            pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "CLIPTextModel"))
register("hf_t5", "transformers")(hf(
    "t5", lambda t: t.T5Config(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                               vocab_size=1000, use_cache=False), "T5ForConditionalGeneration",
    labels=True))
register("hf_pegasus", "transformers")(hf(
    "pegasus", lambda t: t.PegasusConfig(d_model=64, encoder_layers=2, decoder_layers=2,
                                         encoder_attention_heads=4, decoder_attention_heads=4,
                                         encoder_ffn_dim=128, decoder_ffn_dim=128,
                                         vocab_size=1000, max_position_embeddings=128,
                                         use_cache=False), "PegasusModel", labels=True))


def _hf_image(model_cls, config_fn, size=64, channels=3):
    def build():
        import transformers
        seed()
        m = getattr(transformers, model_cls)(config_fn(transformers)).eval()
        return dict(model=m, args=(torch.randn(1, channels, size, size),))
    return build


register("hf_clip_vision", "transformers")(_hf_image("CLIPVisionModel", lambda t: t.CLIPVisionConfig(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
    image_size=64, patch_size=16)))
register("hf_siglip_vision", "transformers")(_hf_image(
    "SiglipVisionModel", lambda t: t.SiglipVisionConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        image_size=64, patch_size=16)))
register("hf_dinov2", "transformers")(_hf_image("Dinov2Model", lambda t: t.Dinov2Config(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=64, patch_size=16)))
register("hf_deit", "transformers")(_hf_image("DeiTModel", lambda t: t.DeiTConfig(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
    image_size=64, patch_size=16)))
register("hf_beit", "transformers")(_hf_image("BeitModel", lambda t: t.BeitConfig(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
    image_size=64, patch_size=16, use_relative_position_bias=True)))
register("hf_convnext", "transformers")(_hf_image("ConvNextModel", lambda t: t.ConvNextConfig(
    hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1])))
register("hf_resnet", "transformers")(_hf_image("ResNetModel", lambda t: t.ResNetConfig(
    hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], embedding_size=16)))
register("hf_swin", "transformers")(_hf_image("SwinModel", lambda t: t.SwinConfig(
    image_size=64, patch_size=4, embed_dim=16, depths=[1, 1, 2], num_heads=[2, 2, 4],
    window_size=4)))
register("hf_segformer", "transformers")(_hf_image(
    "SegformerForSemanticSegmentation", lambda t: t.SegformerConfig(
        hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], decoder_hidden_size=64,
        num_labels=5)))
register("hf_mobilevit", "transformers")(_hf_image(
    "MobileViTModel", lambda t: t.MobileViTConfig(image_size=64, hidden_sizes=[32, 48, 64],
                                                  neck_hidden_sizes=[8, 16, 24, 32, 40, 48, 160])))


@register("hf_wav2vec2", "transformers")
def _hf_wav2vec2():
    import transformers
    seed()
    cfg = transformers.Wav2Vec2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=128, conv_dim=(32, 32, 32),
                                      conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                                      num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
                                      vocab_size=32)
    m = transformers.Wav2Vec2Model(cfg).eval()
    return dict(model=m, args=(torch.randn(1, 1600),))


@register("hf_vit", "transformers")
def _hf_vit():
    import transformers
    seed()
    cfg = transformers.ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                 intermediate_size=128, image_size=64, patch_size=16)
    m = transformers.ViTModel(cfg).eval()
    return dict(model=m, args=(torch.randn(1, 3, 64, 64),))


@register("hf_whisper_encoder", "transformers")
def _hf_whisper():
    import transformers
    seed()
    cfg = transformers.WhisperConfig(d_model=64, encoder_layers=2, decoder_layers=2,
                                     encoder_attention_heads=4, decoder_attention_heads=4,
                                     encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=80,
                                     max_source_positions=50, vocab_size=1000,
                                     pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                     decoder_start_token_id=3)
    m = transformers.WhisperModel(cfg).get_encoder().eval()
    # the encoder needs exactly 2 * max_source_positions frames
    return dict(model=m, args=(torch.randn(1, 80, 100),))


# ---- ExportDB -------------------------------------------------------------------------

def _exportdb_cases():
    try:
        from torch._export.db.examples import all_examples
        return all_examples()
    except Exception:
        return {}


def exportdb(case_name):
    def build():
        from torch._export.db.case import SupportLevel
        case = _exportdb_cases()[case_name]
        if case.support_level != SupportLevel.SUPPORTED:
            return dict(skip="ExportDB marks it %s" % case.support_level.name)
        m = case.model
        if isinstance(m, torch.nn.Module):
            m = m.eval()
        spec = dict(model=m, args=tuple(case.example_args), kwargs=dict(case.example_kwargs),
                    dynamic_shapes=case.dynamic_shapes, strict=True)
        args2 = _exportdb_second_args(m, spec["args"], case.dynamic_shapes)
        if args2 is not None:
            spec["args2"] = args2
        return spec
    return build


def _exportdb_second_args(m, args, dyn):
    """A second call for an ExportDB case with dynamic dims: each dynamic dim of a tensor
    argument one smaller (two larger when that would go under 2), other values unchanged
    (cond_operands' predicate x.shape[0] > 2 then takes the other branch)."""
    import inspect
    if not isinstance(dyn, dict):
        return None
    try:
        names = list(inspect.signature(m.forward if isinstance(m, torch.nn.Module) else m)
                     .parameters)
    except (TypeError, ValueError):
        return None
    g = torch.Generator().manual_seed(3)
    out, changed = [], False
    for i, a in enumerate(args):
        dims = dyn.get(names[i]) if i < len(names) else None
        if isinstance(a, torch.Tensor) and isinstance(dims, dict) and dims:
            shape = list(a.shape)
            for k in dims:
                shape[k] = shape[k] - 1 if shape[k] - 1 >= 2 else shape[k] + 2
            if a.is_floating_point():
                a = torch.randn(shape, generator=g, dtype=a.dtype)
            else:
                a = torch.randint(0, 5, shape, generator=g, dtype=a.dtype)
            changed = True
        out.append(a)
    return tuple(out) if changed else None


for _case in sorted(_exportdb_cases()):
    register("exportdb_" + _case, "exportdb")(exportdb(_case))


# ---- the README's Python example (the aotc package, if importable) --------------------

@register("readme_python_example", "readme")
def _readme():
    try:
        import aotc  # noqa: F401
    except Exception as e:
        return dict(skip="the aotc Python package is not importable (%s); see --pyaotc" % e)

    def check(out_dir):
        import aotc
        seed()

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
                self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
                self.fc = torch.nn.Linear(16 * 8 * 8, 10)

            def forward(self, x):
                x = torch.relu(self.conv1(x))
                x = torch.relu(self.conv2(x))
                return self.fc(x.flatten(1))

        model = Net().eval()
        x = torch.randn(2, 3, 16, 16)
        x2 = torch.randn(5, 3, 16, 16)
        ep = torch.export.export(model.eval(), (x,),
                                 dynamic_shapes=({0: Dim("batch", min=1, max=32)},))
        so = os.path.join(out_dir, "model.so")
        aotc.compile(ep, so)          # as in README.md
        m = aotc.load(so, device="cpu", threads=None)
        details, ok_all = [], True
        for i, xi in enumerate((x, x2)):
            out = m(xi)
            ref = ep.module()(xi)
            ok, det = compare(tree_flatten(ref)[0],
                              {str(j): (torch.as_tensor(v) if not isinstance(v, torch.Tensor)
                                        else v) for j, v in enumerate(tree_flatten(out)[0])})
            det["call"] = i
            det["output_type"] = type(out).__name__
            details.append(det)
            ok_all = ok_all and ok
        return dict(status="pass" if ok_all else "mismatch", compare=details, dynamic=True,
                    calls_compared=2,
                    max_abs_diff=max(d["max_abs_diff"] for d in details),
                    aotc_module=getattr(aotc, "__file__", None),
                    error=None if ok_all else "; ".join(p for d in details
                                                        for p in d["problems"]))
    return dict(custom=check)


# --------------------------------------------------------------------------------------
# Running one model
# --------------------------------------------------------------------------------------

def randomize_zero_params(model):
    """Parameters initialised to all zeros (classifier heads of torchvision's ViT, timm's
    Mixer, ... zero-init their last layer) make the output constant and the comparison
    vacuous: give them small random values (seeded). Returns how many were changed."""
    g = torch.Generator().manual_seed(2)
    n = 0
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 1 and p.is_floating_point() and not p.any():
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.02)
                n += 1
    return n


def clone_tree(x):
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*[clone_tree(v) for v in x])
    if isinstance(x, (list, tuple)):
        return type(x)(clone_tree(v) for v in x)
    if isinstance(x, dict):
        return {k: clone_tree(v) for k, v in x.items()}
    return x


def save_inputs(path, args, kwargs):
    import safetensors.torch
    leaves, _ = tree_flatten((args, kwargs))
    tensors, scalars = {}, {}
    for i, v in enumerate(leaves):
        if isinstance(v, torch.Tensor):
            tensors[str(i)] = v.detach().contiguous().clone()
        elif isinstance(v, (bool, int, float, str)) or v is None:
            scalars[str(i)] = v
        else:
            raise TypeError("input %d has type %s" % (i, type(v).__name__))
    meta = {"scalars": json.dumps(scalars)} if scalars else None
    safetensors.torch.save_file(tensors, path, metadata=meta)


def first_error_line(text):
    lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
    for l in lines:
        if l.lower().startswith("error") or "error:" in l.lower():
            return l
    return lines[0] if lines else ""


OP_RE = re.compile(r"((?:aten|prims|higher_order|torch\.ops\.[a-z_]+|_operator)"
                   r"[.:][A-Za-z0-9_.]+)")


def named_operator(text):
    """The operators an aotc error names ("  torch.ops.aten.x.default: used by ..." lines
    first, else any operator-looking name), comma-separated; None when it names none."""
    ops = re.findall(r"^\s*(torch\.ops\.[A-Za-z0-9_.]+): used by", text, re.M)
    if not ops:
        ops = OP_RE.findall(text)
    seen = []
    for o in ops:
        if o not in seen:
            seen.append(o)
    return ", ".join(seen) if seen else None


def compare(ref, got):
    """ref: list of leaves of eager output; got: dict index -> tensor. Returns (ok, detail)."""
    worst = 0.0
    worst_rel = 0.0
    problems = []
    compared = 0
    for i, r in enumerate(ref):
        key = str(i)
        if not isinstance(r, torch.Tensor):
            if key in got:
                g = got[key]
                gv = g.item() if isinstance(g, torch.Tensor) else g
                if gv != r and not (isinstance(r, float) and math.isclose(gv, r, rel_tol=RTOL,
                                                                           abs_tol=ATOL)):
                    problems.append("output %d: %r vs %r" % (i, gv, r))
                compared += 1
            else:
                problems.append("output %d (%s %r) missing" % (i, type(r).__name__, r))
            continue
        if key not in got:
            problems.append("output %d missing" % i)
            continue
        g = got[key]
        if not isinstance(g, torch.Tensor):
            g = torch.tensor(g)
        compared += 1
        if tuple(g.shape) != tuple(r.shape):
            problems.append("output %d shape %s vs %s" % (i, tuple(g.shape), tuple(r.shape)))
            continue
        if g.dtype != r.dtype:
            problems.append("output %d dtype %s vs %s" % (i, g.dtype, r.dtype))
            continue
        if r.is_floating_point() or r.is_complex():
            r32, g32 = r.double(), g.double()
            if r32.numel():
                finite_r = torch.isfinite(r32)
                if not torch.equal(finite_r, torch.isfinite(g32)):
                    problems.append("output %d: non-finite values differ" % i)
                    continue
                d = (r32 - g32).abs()[finite_r]
                if d.numel():
                    md = d.max().item()
                    worst = max(worst, md)
                    scale = r32[finite_r].abs().max().item()
                    worst_rel = max(worst_rel, md / scale if scale > 0 else md)
                if not torch.allclose(g32, r32, rtol=RTOL, atol=ATOL, equal_nan=True):
                    problems.append("output %d max abs diff %.3g (max |ref| %.3g)" % (
                        i, d.max().item() if d.numel() else float("nan"),
                        r32.abs().max().item()))
        else:
            if not torch.equal(g, r):
                n = (g != r).sum().item()
                problems.append("output %d: %d of %d values differ" % (i, n, r.numel()))
    extra = sorted(set(got) - {str(i) for i in range(len(ref))})
    if extra:
        problems.append("extra outputs %s" % extra)
    scale = max([r.double().abs().max().item() for r in ref
                 if isinstance(r, torch.Tensor) and r.is_floating_point() and r.numel()
                 and torch.isfinite(r).all()] or [float("nan")])
    return (not problems), dict(problems=problems, max_abs_diff=worst, max_rel_diff=worst_rel,
                                compared=compared, ref_scale=scale)


def _to_double(x):
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.double()
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(_to_double(v) for v in x)
    if isinstance(x, dict):
        return {k: _to_double(v) for k, v in x.items()}
    return clone_tree(x)


def fp64_check(model, calls, refs, d):
    """For a float mismatch: is aotc's error of the size of PyTorch's own float32 rounding?
    Runs the model in float64 and gives, per call, max |aotc - fp64| and max |torch fp32 -
    fp64| over the float outputs."""
    import copy
    if not isinstance(model, torch.nn.Module):
        return None
    try:
        m64 = copy.deepcopy(model).double().eval()
        out = []
        for i, (a, k) in enumerate(calls):
            with torch.no_grad():
                r64 = tree_flatten(m64(*_to_double(a), **_to_double(k)))[0]
            got = load_outputs(os.path.join(d, "outputs_%d.safetensors" % i))
            ea = et = 0.0
            for j, (r, t) in enumerate(zip(r64, refs[i])):
                if not (isinstance(r, torch.Tensor) and r.is_floating_point()):
                    continue
                g = got.get(str(j))
                if g is None or tuple(g.shape) != tuple(r.shape):
                    continue
                fin = torch.isfinite(r)
                ea = max(ea, (g.double() - r).abs()[fin].max().item())
                et = max(et, (t.double() - r).abs()[fin].max().item())
            out.append(dict(call=i, aotc_vs_fp64=ea, torch_fp32_vs_fp64=et))
        return out
    except Exception as e:
        return "failed: %s: %s" % (type(e).__name__, str(e)[:200])


def load_outputs(path):
    import safetensors
    import safetensors.torch
    got = safetensors.torch.load_file(path)
    with safetensors.safe_open(path, "pt") as f:
        meta = f.metadata() or {}
    if "scalars" in meta:
        for k, v in json.loads(meta["scalars"]).items():
            got[k] = v
    return got


def compile_run_compare(res, pt2, d, indir, calls, refs, aotc, model):
    """aotc compile + aotc run + compare; fills res (status, error, ...)."""
    env = dict(os.environ, AOTC_NUM_THREADS="1")
    so = os.path.join(d, "model.so")
    t1 = time.time()
    try:
        p = subprocess.run(["nice", "-n", "10", aotc, "compile", pt2, "-o", so],
                           capture_output=True, text=True, timeout=COMPILE_TIMEOUT, env=env)
    except subprocess.TimeoutExpired:
        res.update(status="compile failed", error="timeout after %ds" % COMPILE_TIMEOUT)
        return res
    res["compile_s"] = round(time.time() - t1, 2)
    if p.returncode != 0:
        text = p.stderr + p.stdout
        res.update(status="compile failed", error=first_error_line(text)[:500],
                   operator=named_operator(text), stderr=text[-3000:])
        return res

    for old in os.listdir(d):
        if old.startswith("outputs_") or old.startswith("mutated_"):
            os.remove(os.path.join(d, old))
    cmd = ["nice", "-n", "10", aotc, "run", so]
    for i in range(len(calls)):
        cmd += ["--input", os.path.join(indir, "inputs_%d.safetensors" % i)]
    cmd += ["--output-dir", d]
    t2 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env)
    except subprocess.TimeoutExpired:
        res.update(status="run failed", error="timeout after %ds" % RUN_TIMEOUT)
        return res
    res["run_s"] = round(time.time() - t2, 2)
    if p.returncode != 0:
        text = p.stderr + p.stdout
        res.update(status="run failed", error=first_error_line(text)[:500],
                   operator=named_operator(text), stderr=text[-3000:])
        return res

    details = []
    ok_all = True
    for i, ref in enumerate(refs[:len(calls)]):
        path = os.path.join(d, "outputs_%d.safetensors" % i)
        if not os.path.exists(path):
            ok_all = False
            details.append(dict(call=i, problems=["no outputs file"]))
            continue
        ok, det = compare(ref, load_outputs(path))
        det["call"] = i
        details.append(det)
        ok_all = ok_all and ok
    res["calls_compared"] = len(details)
    res["compare"] = details
    res["max_abs_diff"] = max((x.get("max_abs_diff", 0.0) for x in details), default=0.0)
    res["max_rel_diff"] = max((x.get("max_rel_diff", 0.0) for x in details), default=0.0)
    res["ref_scale"] = max((x.get("ref_scale", 0.0) for x in details), default=0.0)
    if res["ref_scale"] == 0.0:
        res["note"] = "every float output is zero: the comparison says little"
    if ok_all:
        res["status"] = "pass"
    else:
        res["status"] = "mismatch"
        probs = [p for x in details for p in x["problems"]]
        res["error"] = "; ".join(probs)[:500]
        res["fp64_check"] = fp64_check(model, calls, refs, d)
    return res


def run_one(name, family, builder, aotc, out_dir):
    res = dict(name=name, family=family, status=None)
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    t0 = time.time()
    try:
        spec = builder()
    except Exception as e:
        res.update(status="build failed", error="%s: %s" % (type(e).__name__, str(e)[:500]))
        return res
    if "skip" in spec:
        res.update(status="skipped", error=spec["skip"])
        return res
    if "custom" in spec:
        os.environ.setdefault("AOTC_NUM_THREADS", "1")
        # aotc.compile runs $AOTC_CLI when set: the binary under test, not the one in the wheel
        os.environ.setdefault("AOTC_CLI", aotc)
        res["aotc_cli"] = os.environ["AOTC_CLI"]
        try:
            res.update(spec["custom"](d))
        except Exception as e:
            res.update(status="run failed", error="%s: %s" % (type(e).__name__, str(e)[:500]),
                       trace=traceback.format_exc()[-2000:])
        return res
    model = spec["model"]
    if family != "exportdb" and isinstance(model, torch.nn.Module):
        res["reinitialised_zero_params"] = randomize_zero_params(model)
    args = spec["args"]
    kwargs = spec.get("kwargs") or {}
    dyn = spec.get("dynamic_shapes")
    calls = [(args, kwargs)]
    if "args2" in spec or "kwargs2" in spec:
        calls.append((spec.get("args2", args), spec.get("kwargs2", kwargs)))
    res["dynamic"] = dyn is not None

    # export (default IR)
    try:
        with torch.no_grad():
            ep = torch.export.export(model, clone_tree(args), clone_tree(kwargs),
                                     dynamic_shapes=dyn, strict=spec.get("strict", False))
    except Exception as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        res.update(status="export failed", error="%s: %s" % (type(e).__name__, msg[:400]))
        return res
    res["export_s"] = round(time.time() - t0, 2)
    res["ops"] = sorted({str(n.target) for n in ep.graph.nodes if n.op == "call_function"})
    pt2 = os.path.join(d, "model.pt2")
    try:
        torch.export.save(ep, pt2)
    except Exception as e:
        res.update(status="export failed", error="torch.export.save: %s: %s" % (
            type(e).__name__, str(e)[:400]))
        return res

    # eager reference (ep.module()), on clones since a program may mutate its inputs
    refs = []
    try:
        mod = ep.module()
        for i, (a, k) in enumerate(calls):
            save_inputs(os.path.join(d, "inputs_%d.safetensors" % i), a, k)
            with torch.no_grad():
                out = mod(*clone_tree(a), **clone_tree(k))
            refs.append(tree_flatten(out)[0])
    except Exception as e:
        if not refs:
            res.update(status="reference failed", error="%s: %s" % (type(e).__name__,
                                                                     str(e)[:400]))
            return res
        # second call refused by ep.module() (e.g. specialised dim): keep the first only
        res["note"] = "second input refused by ep.module(): %s" % str(e).splitlines()[0][:200]
        calls = calls[:1]

    compile_run_compare(res, pt2, d, d, calls, refs, aotc, model)
    if CORE_RETRY and res["status"] in ("compile failed", "run failed", "mismatch"):
        # the same program after run_decompositions() (Core ATen IR), for comparison only
        core = dict(status=None)
        try:
            cd = os.path.join(d, "core_aten")
            os.makedirs(cd, exist_ok=True)
            ep2 = ep.run_decompositions()
            torch.export.save(ep2, os.path.join(cd, "model.pt2"))
            compile_run_compare(core, os.path.join(cd, "model.pt2"), cd, d, calls, refs, aotc,
                                model)
        except Exception as e:
            core.update(status="export failed", error="run_decompositions: %s: %s" % (
                type(e).__name__, str(e)[:300]))
        res["core_aten_retry"] = {k: v for k, v in core.items() if k != "stderr"}
    res["total_s"] = round(time.time() - t0, 2)
    return res


# --------------------------------------------------------------------------------------



def summarize(results):
    fams = {}
    for r in results.values():
        f = fams.setdefault(r["family"], dict(models=0, skipped=0, exported=0, compiled=0,
                                               ran=0, matched=0))
        f["models"] += 1
        s = r["status"]
        if s == "skipped":
            f["skipped"] += 1
            continue
        if s in ("build failed", "export failed"):
            continue
        f["exported"] += 1
        if s in ("compile failed", "reference failed"):
            continue
        f["compiled"] += 1
        if s == "run failed":
            continue
        f["ran"] += 1
        if s == "pass":
            f["matched"] += 1
    tot = {k: sum(f[k] for f in fams.values()) for k in
           ("models", "skipped", "exported", "compiled", "ran", "matched")}
    return fams, tot


def print_table(results):
    w = max([len(n) for n in results] + [10])
    print("\n%-*s  %-15s %s" % (w, "model", "status", "detail"))
    for n, r in results.items():
        detail = r.get("error", "")
        if r["status"] == "pass":
            detail = "max abs diff %.2g (relative to max |ref|: %.2g) over %d call(s)%s%s" % (
                r.get("max_abs_diff", 0), r.get("max_rel_diff", 0), r.get("calls_compared", 0),
                ", dynamic" if r.get("dynamic") else "",
                "; NOTE: " + r["note"] if r.get("note") else "")
        elif r.get("operator"):
            detail = "[%s] %s" % (r["operator"], detail)
        if r.get("core_aten_retry"):
            detail += " | after run_decompositions(): %s" % r["core_aten_retry"]["status"]
        if isinstance(r.get("fp64_check"), list):
            detail += " | fp64: aotc err %.3g, torch fp32 err %.3g" % (
                max(c["aotc_vs_fp64"] for c in r["fp64_check"]),
                max(c["torch_fp32_vs_fp64"] for c in r["fp64_check"]))
        print("%-*s  %-15s %s" % (w, n, r["status"], detail[:200]))
    fams, tot = summarize(results)
    print("\n%-14s %7s %8s %9s %9s %5s %8s" % ("family", "models", "skipped", "exported",
                                              "compiled", "ran", "matched"))
    for f, c in sorted(fams.items()) + [("TOTAL", tot)]:
        print("%-14s %7d %8d %9d %9d %5d %8d" % (f, c["models"], c["skipped"], c["exported"],
                                                 c["compiled"], c["ran"], c["matched"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aotc", default=os.path.join(os.path.dirname(__file__), "..", "target",
                                                   "release", "aotc"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default=None, help="regex on model names (re.search)")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    ap.add_argument("--pyaotc", default=None,
                    help="a directory holding the aotc Python package (e.g. a wheel installed "
                         "with pip install --target DIR), prepended to sys.path for the README "
                         "example")
    ap.add_argument("--core-retry", action="store_true",
                    help="for a model that fails to compile, run or match, also try its "
                         "program after run_decompositions() (Core ATen), recorded apart")
    ap.add_argument("--resume", action="store_true",
                    help="skip the models results.json already has (after a crash)")
    ap.add_argument("--clean-passed", action="store_true",
                    help="delete the .pt2 and the library of each model that passes (disk)")
    a = ap.parse_args()
    global CORE_RETRY
    CORE_RETRY = a.core_retry
    if a.pyaotc:
        sys.path.insert(0, os.path.abspath(a.pyaotc))
    if a.list:
        for n, f, _ in MODELS:
            print(f, n)
        return
    aotc = os.path.abspath(a.aotc)
    os.makedirs(a.out, exist_ok=True)
    rpath = os.path.join(a.out, "results.json")
    results = {}
    if os.path.exists(rpath):
        with open(rpath) as fh:
            results = json.load(fh)
    sel = [(n, f, b) for n, f, b in MODELS if a.only is None or re.search(a.only, n)]
    if a.resume:
        sel = [(n, f, b) for n, f, b in sel if n not in results]
    for n, f, b in sel:
        print("[%s] %s ..." % (time.strftime("%H:%M:%S"), n), flush=True)
        try:
            r = run_one(n, f, b, aotc, a.out)
        except Exception as e:
            r = dict(name=n, family=f, status="harness error",
                     error="%s: %s" % (type(e).__name__, str(e)[:400]),
                     trace=traceback.format_exc()[-2000:])
        results[n] = r
        if a.clean_passed and r["status"] == "pass":
            for root, _, files in os.walk(os.path.join(a.out, n)):
                for fn in files:
                    if fn.endswith((".so", ".pt2", ".weights.safetensors")):
                        os.remove(os.path.join(root, fn))
        print("    -> %s %s" % (r["status"], (r.get("error") or "")[:200]), flush=True)
        with open(rpath, "w") as fh:
            json.dump(results, fh, indent=1, default=str)
    # keep the registry order
    order = {n: i for i, (n, _, _) in enumerate(MODELS)}
    results = dict(sorted(results.items(), key=lambda kv: order.get(kv[0], 1 << 30)))
    print_table(results)


if __name__ == "__main__":
    main()
