"""A small Vision Transformer for the self-supervised and DeiT examples,
written out (no timm, no pretrained weights): patch embedding, a class
token, learned position embeddings interpolated to any grid (DINO's local
crops are smaller than its global ones), pre-norm encoder blocks."""

import torch
import torch.nn.functional as F
from torch import nn


class TinyViT(nn.Module):
    def __init__(self, image_size=224, patch_size=16, dim=192, depth=4, heads=3,
                 num_classes=0):
        super().__init__()
        self.patch_size = patch_size
        self.embed = nn.Conv2d(3, dim, patch_size, patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.grid = image_size // patch_size
        self.pos_embed = nn.Parameter(torch.randn(1, 1 + self.grid ** 2, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, dim * 4, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.dim = dim
        self.head = nn.Linear(dim, num_classes) if num_classes else nn.Identity()

    def position_embedding(self, height, width):
        """The learned embedding, its grid resized to `height` x `width`
        patches (bicubic), as DINO's interpolate_pos_encoding does."""
        if (height, width) == (self.grid, self.grid):
            return self.pos_embed
        cls, grid = self.pos_embed[:, :1], self.pos_embed[:, 1:]
        grid = grid.reshape(1, self.grid, self.grid, -1).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, size=(height, width), mode="bicubic", align_corners=False)
        return torch.cat([cls, grid.permute(0, 2, 3, 1).reshape(1, height * width, -1)], dim=1)

    def forward(self, images):
        """images: float [B, 3, H, W], normalized; the class token's
        features (or logits with num_classes)."""
        patches = self.embed(images)
        height, width = patches.shape[-2:]
        tokens = patches.flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls_token.expand(len(tokens), -1, -1), tokens], dim=1)
        tokens = self.blocks(tokens + self.position_embedding(height, width))
        return self.head(self.norm(tokens[:, 0]))
