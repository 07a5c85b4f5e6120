"""Reference solution of exercise 2501."""


def token_bitmask(vocab, transitions, accepting, state, eos_id):
    if not 0 <= state < len(transitions) or not 0 <= eos_id < len(vocab):
        raise ValueError("state must be a state of the automaton and eos_id a token of vocab")
    words = [0] * ((len(vocab) + 31) // 32)
    for token, text in enumerate(vocab):
        if token == eos_id:
            allowed = state in accepting
        else:
            at = state
            for char in text:
                at = transitions[at].get(char)
                if at is None:
                    break
            allowed = bool(text) and at is not None
        if allowed:
            words[token // 32] |= 1 << (token % 32)
    return [w - (1 << 32) if w >= 1 << 31 else w for w in words]
