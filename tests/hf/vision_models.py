"""Tiny random Qwen2-VL and Qwen2.5-VL (built from configs, no hub) and samples with images for them.

Two transformer layers of width 32 over a 128-token vocabulary, a two-layer vision
tower of patch 2 merging 2 x 2 patches into one token; ids 120-123 are the image,
video, vision-start and vision-end tokens. Each sample is text, one image (its
placeholder tokens between vision-start and vision-end), text: what the processor gives.
"""

from __future__ import annotations

import torch

IMAGE, VIDEO, START, END = 120, 121, 122, 123
PATCH, TEMPORAL, MERGE = 2, 2, 2
FAMILIES = ("qwen2_vl", "qwen2_5_vl")


def tiny_vlm(family: str, seed: int = 0):
    from transformers import (Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2VLConfig,
                              Qwen2VLForConditionalGeneration)

    text = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=512, bos_token_id=None, eos_token_id=None,
                rope_parameters={"rope_type": "default", "mrope_section": [2, 1, 1], "rope_theta": 10000.0})
    tokens = dict(image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=START, vision_end_token_id=END)
    if family == "qwen2_vl":
        vision = dict(depth=2, embed_dim=32, hidden_size=32, num_heads=4, mlp_ratio=2, patch_size=PATCH,
                      spatial_merge_size=MERGE, temporal_patch_size=TEMPORAL, in_channels=3)
        config, cls = Qwen2VLConfig(text_config=text, vision_config=vision, **tokens), Qwen2VLForConditionalGeneration
    else:
        vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=4, out_hidden_size=32,
                      patch_size=PATCH, spatial_merge_size=MERGE, temporal_patch_size=TEMPORAL, in_channels=3,
                      window_size=8, fullatt_block_indexes=[1])
        config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, **tokens)
        cls = Qwen2_5_VLForConditionalGeneration
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return cls(config).eval()


def sample(before: int, grid: tuple[int, int, int], after: int, generator: torch.Generator) -> dict:
    """Text, an image of ``grid`` = (t, h, w) patches, text: one sample's inputs as the processor gives them."""
    t, h, w = grid
    image_tokens = t * h * w // (MERGE * MERGE)
    ids = torch.cat([torch.randint(0, 100, (before,), generator=generator), torch.tensor([START]),
                     torch.full((image_tokens,), IMAGE), torch.tensor([END]),
                     torch.randint(0, 100, (after,), generator=generator)])
    pixels = torch.randn(t * h * w, 3 * TEMPORAL * PATCH * PATCH, generator=generator)
    return {"input_ids": ids[None], "pixel_values": pixels, "image_grid_thw": torch.tensor([[t, h, w]]),
            "mm_token_type_ids": (ids == IMAGE).int()[None]}


def samples(seed: int = 1) -> list[dict]:
    """Three samples: two with an image of different shapes, one of text only."""
    g = torch.Generator().manual_seed(seed)
    text_only = torch.randint(0, 100, (9,), generator=g)
    return [sample(5, (1, 4, 4), 6, g), sample(3, (1, 4, 8), 7, g),
            {"input_ids": text_only[None], "mm_token_type_ids": torch.zeros(1, 9, dtype=torch.int)}]
