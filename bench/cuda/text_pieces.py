"""How the time-to-loss corpus (bench/cuda/ttl_data.sh) and the leaderboard
rehearsal's stand-in for OpenWebText (bench/cuda/recipe_data.sh) mix their two
sources: text cut into pieces at blank lines, and two lists of pieces
interleaved by relative position, so that every stretch of the stream holds
both in proportion."""


def cut(data, piece):
    """`data` (bytes) in pieces of about `piece` bytes, each ending at a blank
    line where one lies in the piece's second half."""
    out, i = [], 0
    while i < len(data):
        j = min(len(data), i + piece)
        if j < len(data):
            k = data.rfind(b"\n\n", i + piece // 2, j)
            j = k + 2 if k > 0 else j
        out.append(data[i:j])
        i = j
    return out


def interleave(a, b):
    """(0, x) for each x of a and (1, y) for each y of b, ordered by position
    within its own list (ties: a's first)."""
    order = sorted([((i + 0.5) / len(a), 0, x) for i, x in enumerate(a)] +
                   [((i + 0.5) / len(b), 1, x) for i, x in enumerate(b)], key=lambda t: t[0])
    return [(which, x) for _, which, x in order]
