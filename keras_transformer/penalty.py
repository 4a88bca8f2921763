"""GNMT's length penalty (Wu et al., 2016), with which §6.1's beam search ranks hypotheses:
written once, without TensorFlow, for the searches, forced decoding and the CTranslate2 engine."""


def length_penalty(length, alpha):
    """lp(Y) = ((5 + |Y|) / 6)^alpha, |Y| counting the generated tokens with eos. `length`: a
    Python number, a NumPy array, or a float tensor (cast integer tensors first)."""
    return ((5.0 + length) / 6.0) ** alpha
