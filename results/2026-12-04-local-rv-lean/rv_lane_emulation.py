# Lane-level emulation of GATED_DELTA_NET_REPLAY_VERIFY's warp (8 columns), the landed loop
# (group_recurrence::<8,16>, columns_token_update with kv broadcast) against the lean one
# (lane-ordered 16-scatter, own-lane δ, unconditional loads). Same emulated float ops in both,
# so any index/permutation mistake shows as a bit difference.
import numpy as np, sys
f32 = np.float32
def fma(a, b, c): return f32(np.float64(a) * np.float64(b) + np.float64(c))
def mul(a, b): return f32(f32(a) * f32(b))
def add(a, b): return f32(f32(a) + f32(b))
def decay(g): return f32(np.exp2(np.float64(mul(g, f32(1.4426950216293334961)))))
def delta(kv, gamma, v, beta): return mul(beta, fma(-gamma, kv, v))
def lane_dot(s, x):
    acc = f32(0)
    for r in range(4): acc = fma(s[r], x[r], acc)
    return acc
def update(s, k, gamma, d):
    return [fma(gamma, s[r], mul(k[r], d)) for r in range(4)]
L = range(32)
def shfl_xor(vals, m): return [vals[l ^ m] for l in L]
def shfl_idx(vals, src): return [vals[src] for l in L]
def butterfly(vals):  # warp_sum in every lane
    v = list(vals)
    for o in (16, 8, 4, 2, 1):
        p = shfl_xor(v, o); v = [add(v[l], p[l]) for l in L]
    return v
def half_step(y, O, B):  # y[lane][m]
    sends = [[(y[l][m] if (l & B) else y[l][O + m]) for m in range(O)] for l in L]
    keeps = [[(y[l][O + m] if (l & B) else y[l][m]) for m in range(O)] for l in L]
    out = []
    for l in L:
        out.append([add(keeps[l][m], sends[l ^ B][m]) for m in range(O)] + y[l][O:])
    return out
def sixteen(x):  # x[lane][16] -> value (lane>>1)&15
    y = [list(x[l]) + [f32(0)] * 16 for l in L]
    for O, B in ((8, 16), (4, 8), (2, 4), (1, 2)): y = half_step(y, O, B)
    v = [y[l][0] for l in L]; p = shfl_xor(v, 1)
    return [add(v[l], p[l]) for l in L]
def sixteen_lane_ordered(x):
    p = [[x[l ^ 16][8 + m] for m in range(8)] for l in L]
    y = [[add(x[l][m], p[l][m]) for m in range(8)] + [f32(0)] * 24 for l in L]
    for O, B in ((4, 8), (2, 4), (1, 2)): y = half_step(y, O, B)
    v = [y[l][0] for l in L]; p = shfl_xor(v, 1)
    return [add(v[l], p[l]) for l in L]
def eight(x):  # value (lane>>2)&7
    y = [list(x[l]) + [f32(0)] * 24 for l in L]
    for O, B in ((4, 16), (2, 8), (1, 4)): y = half_step(y, O, B)
    v = [y[l][0] for l in L]
    for o in (2, 1):
        p = shfl_xor(v, o); v = [add(v[l], p[l]) for l in L]
    return v

def rows(vec, l): return [vec[32 * r + l] for r in range(4)]

def run(old, S0, log, ver, scale):
    # S0[j][i]: column j's 128 rows. log: list of (k[128], v[8], g, beta); ver: list of (q, k, v, g, beta)
    s = [[rows(S0[j], l) for j in range(8)] for l in L]
    # replay
    for (k, v, g, beta) in log:
        gamma = decay(g)
        dots = [[lane_dot(s[l][j], rows(k, l)) for j in range(8)] for l in L]
        sums = eight(dots)
        if old:
            for j in range(8):
                kv = shfl_idx(sums, 4 * j)
                for l in L: s[l][j] = update(s[l][j], rows(k, l), gamma, delta(kv[l], gamma, v[j], beta))
        else:
            own = [delta(sums[l], gamma, v[l // 4], beta) for l in L]
            for j in range(8):
                d = shfl_idx(own, 4 * j)
                for l in L: s[l][j] = update(s[l][j], rows(k, l), gamma, d[l])
    stored = [[s[l][j] for l in L] for j in range(8)]
    T = len(ver); outs = []
    if old:
        x = ver[0]
        both = [[f32(0)] * 8 + [lane_dot(s[l][j], rows(x[1], l)) for j in range(8)] for l in L]
        sums = sixteen(both); kv = [shfl_idx(sums, (8 + j) * 2)[0] for j in range(8)]
        for t in range(T):
            q, k, v, g, beta = ver[t]
            gamma = decay(g)
            both = [[f32(0)] * 16 for l in L]
            for l in L:
                for j in range(8):
                    s[l][j] = update(s[l][j], rows(k, l), gamma, delta(kv[j], gamma, v[j], beta))
                    both[l][j] = lane_dot(s[l][j], rows(q, l))
            if t + 1 < T:
                nk = ver[t + 1][1]
                for l in L:
                    for j in range(8): both[l][8 + j] = lane_dot(s[l][j], rows(nk, l))
            sums = sixteen(both)
            outs.append([mul(sums[2 * j], scale) for j in range(8)])
            if t + 1 < T: kv = [sums[2 * (8 + j)] for j in range(8)]
    else:
        garbage = (np.random.rand(128).astype(f32) * f32(1e30), np.random.rand(8).astype(f32), f32(np.nan), f32(np.inf))
        k0 = ver[0][1]
        dots = [[lane_dot(s[l][j], rows(k0, l)) for j in range(8)] for l in L]
        sums = eight(dots)
        gamma = decay(ver[0][3])
        own = [delta(sums[l], gamma, ver[0][2][l // 4], ver[0][4]) for l in L]
        deltas = [shfl_idx(own, 4 * j)[0] for j in range(8)]
        kcur = k0
        for t in range(T):
            for l in L:
                for j in range(8): s[l][j] = update(s[l][j], rows(kcur, l), gamma, deltas[j])
            q = ver[t][0]
            nxt = ver[t + 1] if t + 1 < T else (None, garbage[0], garbage[1], garbage[2], garbage[3])
            nk = nxt[1]
            both = []
            for l in L:
                first, second = (rows(nk, l), rows(q, l)) if l & 16 else (rows(q, l), rows(nk, l))
                both.append([lane_dot(s[l][j], first) for j in range(8)] + [lane_dot(s[l][j], second) for j in range(8)])
            sums = sixteen_lane_ordered(both)
            outs.append([mul(sums[l], scale) for l in L if l % 2 == 0 and l < 16])
            if t + 1 == T: break
            gamma = decay(nxt[3])
            own = [delta(sums[l], gamma, nxt[2][(l // 2) % 8], nxt[4]) for l in L]
            deltas = [shfl_idx(own, 16 + 2 * j)[0] for j in range(8)]
            kcur = nk
    return stored, outs

rng = np.random.default_rng(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
def vec(n, s=1.0): return (rng.standard_normal(n) * s).astype(f32)
bad = 0
for trial in range(6):
    a = trial % 3; T = [1, 2, 4, 3, 5, 1][trial]
    S0 = [vec(128) for _ in range(8)]
    log = [(vec(128, 0.1), vec(8), f32(-abs(rng.standard_normal())), f32(rng.random())) for _ in range(a)]
    ver = [(vec(128, 0.1), vec(128, 0.1), vec(8), f32(-abs(rng.standard_normal())), f32(rng.random())) for _ in range(T)]
    o = run(True, S0, log, ver, f32(0.088))
    n = run(False, S0, log, ver, f32(0.088))
    same_state = all(np.array(o[0][j], dtype=f32).tobytes() == np.array(n[0][j], dtype=f32).tobytes() for j in range(8))
    same_out = np.array(o[1], dtype=f32).tobytes() == np.array(n[1], dtype=f32).tobytes()
    print(f'a={a} T={T} state {"same" if same_state else "DIFF"} out {"same" if same_out else "DIFF"}')
    bad += (not same_state) + (not same_out)
print('MISMATCHES', bad)
