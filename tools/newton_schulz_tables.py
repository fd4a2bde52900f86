"""Muon's Newton-Schulz tables, as shard/muon.h holds them, for the Python
tools that run the iteration themselves (tools/torch_reference.py, the
PyTorch check; bench/optim/newton_schulz_bf16_error.py, the op table's
bf16 tolerance): per --muon-ns-coefficients value, the odd quintics
(a, b, c) of the steps, the last repeated past the list, and the margin the
Frobenius norm is multiplied by before dividing."""

NS_TABLES = {
    # Keller Jordan's Muon (torch.optim.Muon's default): one quintic every step.
    "jordan": ([(3.4445, -4.7750, 2.0315)], 1.0),
    # Amsel, Persson, Musco, Gower 2025 (arXiv:2505.16932), the 5-step table
    # (safety factor 2e-2, cushion 2), with its 1% margin on the norm.
    "polar_express": ([(8.156554524902461, -22.48329292557795, 15.878769915207462),
                       (4.042929935166739, -2.808917465908714, 0.5000178451051316),
                       (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
                       (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
                       (2.3465413258596377, -1.7097828382687081, 0.42323551169305323)], 1.01),
}
