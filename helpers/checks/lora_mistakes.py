"""Lesson 12's merge_lora, wrong in the classic ways: what a merged weight holds under each mistake
(``weight_variants``, matched against the student's by ``lora_wrap``'s judge), and what an update
of the wrong shape means (``MERGE_HINTS``).

Shape legend: O a base layer's out_features, I its in_features, r the adapters' rank.
"""

from __future__ import annotations

import torch


def weight_variants(W, A, B, r, alpha) -> dict[str, torch.Tensor]:
    """What a merged weight holds under each classic mistake (float64)."""
    s, BA = alpha / r, B @ A  # (O, r) @ (r, I) -> (O, I)
    return {
        "the adapter is missing: it is the base weight W unchanged": W,
        f"B @ A is added without the scale alpha / r = {s:g}": W + BA,
        f"B @ A is scaled by r / alpha = {r / alpha:g}; the scale is alpha / r = {s:g}": W + BA * (r / alpha),
        f"B @ A is scaled by alpha = {alpha:g} alone; the scale is alpha / r = {s:g}": W + BA * alpha,
        "the scaled B @ A is subtracted from W; it is added": W - s * BA,
        "the scaled B @ A is added twice": W + 2 * s * BA,
        "the merged weight is the scaled B @ A alone: W + (alpha / r) B @ A keeps W": s * BA,
        f"the scale alpha / r = {s:g} multiplies W instead of B @ A (torch.addmm(W, B, A, beta=scale) computes "
        "beta × W + B @ A; its alpha= scales the product)": s * W + BA,
    }


#: an update whose shape does not fit the base weight it is added to
MERGE_HINTS = ((("must match the size of tensor", "cannot be multiplied"),
                 "The update added to a base weight must have that weight's shape, (out_features, in_features): "
                 "lora_B @ lora_A is (out, r) @ (r, in) -> (out, in), while lora_A.T @ lora_B.T is its transpose, "
                 "(in, out). Which one does your update compute?"),)
