"Memories are safe to use from several threads: writers, a sampler that writes TD errors back, and saves lose nothing and tear no row"
import sys, threading, time, numpy as np, pytest, torch
from fastrl_replay.memory.experience_replay import ExperienceReplay
from fastrl_replay.memory.prioritized import PrioritizedExperienceReplay
from fastrl_replay.memory.laber import LaBERExperienceReplay
from fastrl_replay.memory.continual import ReservoirReplay, TaskBalancedReplay
from fastrl_replay.compat.reagent import CircularReplayBuffer
from fastrl_replay.memory.persist import load_memory

K = 10**6  # a row's code: writer * K + sequence number
N_SINGLE, N_BATCHES, BATCH = 2000, 4, 4096  # rows of each single-row writer, batches of the batch writer and their size
TOTAL = 2 * N_SINGLE + N_BATCHES * BATCH

def rows(w:int, s0:int, n:int) -> dict:
    "`n` rows of writer `w` from sequence number `s0`: every column holds the row's code, so a row mixed from two writes shows"
    code = w * K + np.arange(s0, s0 + n, dtype=np.int64)
    return {'a': torch.from_numpy(code), 'b': torch.from_numpy(np.repeat(code[:, None], 32, 1)),
            'c': torch.from_numpy(-code.astype(np.float64))}

def torn(b) -> int:
    "How many rows of batch `b` mix values of different writes"
    a = b['a'].reshape(-1)
    return int(((b['b'] != a[:, None]).any(1) | (b['c'].reshape(-1) != -a.double())).sum())

MEMORIES = {'ER': lambda: ExperienceReplay(64, TOTAL + 100, 64, seed=0),
            'PER': lambda: PrioritizedExperienceReplay(64, TOTAL + 100, 64, seed=0),
            'LaBER': lambda: LaBERExperienceReplay(64, TOTAL + 100, 64, seed=0, score=lambda b: b['c'].abs().reshape(-1) % 7 + 1),
            'Reservoir': lambda: ReservoirReplay(64, TOTAL + 100, 64, seed=0),
            'TaskBalanced': lambda: TaskBalancedReplay(64, TOTAL + 100, 64, seed=0)}

def run_threads(*fns):
    "Run each of `fns` in its own thread with a short switch interval; the exceptions they raised"
    errors, old = [], sys.getswitchinterval()
    def guard(f):
        try: f()
        except BaseException as e: errors.append(e)
    sys.setswitchinterval(1e-6)
    try:
        ts = [threading.Thread(target=guard, args=(f,)) for f in fns]
        for t in ts: t.start()
        for t in ts: t.join()
    finally: sys.setswitchinterval(old)
    return errors

@pytest.mark.parametrize('name', MEMORIES)
def test_writers_sampler_and_saves_lose_nothing(name, tmp_path):
    mem, done, sampled, saves = MEMORIES[name](), threading.Event(), [0], []
    mem + rows(9, 0, 64)  # warm-up rows of writer 9, so sampling starts at once
    def single(w):
        for s in range(N_SINGLE):
            if s % 2: mem.append({k: v[0] for k, v in rows(w, s, 1).items()})
            else: mem + rows(w, s, 1)
    def batches():
        for i in range(N_BATCHES): mem + rows(2, i * BATCH, BATCH)
    def sampler():
        while not done.is_set():
            b, idxs = mem.sample()
            sampled[0] += torn(b)
            mem.update_td(torch.rand(len(idxs)), idxs)
    def saver():
        for i in range(3):
            time.sleep(0.05)
            mem.save(tmp_path/f'ck{i}', durable=False); saves.append(tmp_path/f'ck{i}')
    def writers():
        try: assert not run_threads(lambda: single(0), lambda: single(1), batches, saver)
        finally: done.set()
    errors = run_threads(writers, sampler)
    assert not errors, errors
    assert sampled[0] == 0  # no sampled row mixed two writes
    m = mem.storage.memory
    assert len(mem) == TOTAL + 64 and torn(m) == 0
    codes = np.sort(m['a'].numpy())
    want = np.sort(np.concatenate([rows(w, 0, n)['a'].numpy() for w, n in ((9, 64), (0, N_SINGLE), (1, N_SINGLE), (2, N_BATCHES * BATCH))]))
    assert np.array_equal(codes, want)  # every row of every writer, each once
    for ck in saves:  # a save made during the writes is a consistent memory: whole rows, each writer's first rows in order
        back = load_memory(ck)
        bm = back.storage.memory
        assert torn(bm) == 0 and len(back) == len(bm['a'])
        for w in (0, 1, 2):
            seq = np.sort(bm['a'].numpy()[bm['a'].numpy() // K == w] % K)
            assert np.array_equal(seq, np.arange(len(seq))), (w, seq[:10])
            if w == 2: assert len(seq) % BATCH == 0

def test_circular_writers_and_sampler_lose_nothing():
    W = 4  # writers
    buf = CircularReplayBuffer((3,), 1, W * N_SINGLE + 100, 32, prioritized=True, seed=0)
    done = threading.Event()
    def writer(w):
        for s in range(N_SINGLE):
            buf.add(np.array([w, s % 256, s // 256], np.uint8), w * K + s, float(s), s % 100 == 99, env_id=w)
    def sampler():
        while not done.is_set():
            if buf.size < 64: continue
            b = buf.sample_transition_batch()
            buf.update_td(torch.rand(len(b['indices'])), b['indices'])
    def writers():
        try: assert not run_threads(*[lambda w=w: writer(w) for w in range(W)])
        finally: done.set()
    errors = run_threads(writers, sampler)
    assert not errors, errors
    assert buf.add_count == W * N_SINGLE
    st = buf.storage
    act, obs = st.action[:buf.size], st.obs[:buf.size].astype(np.int64)
    for w in range(W):
        mine = act // K == w
        assert np.array_equal(np.sort(act[mine] % K), np.arange(N_SINGLE))  # every step of the writer, each once
        assert np.array_equal(obs[mine, 0], np.full(mine.sum(), w)) and np.array_equal(obs[mine, 1] + 256 * obs[mine, 2], act[mine] % K)
    b = buf.sample_all_valid_transitions()  # each environment's steps linked in order: the next state is the next step's
    s = b['state'].numpy().astype(np.int64)
    nxt = b['next_state'].numpy().astype(np.int64)
    live = ~b['terminated'].numpy().reshape(-1)
    assert np.array_equal(s[live, 0], nxt[live, 0])
    assert np.array_equal((s[:, 1] + 256 * s[:, 2])[live] + 1, (nxt[:, 1] + 256 * nxt[:, 2])[live])

def test_copies_have_locks_of_their_own():
    import copy
    mem = ExperienceReplay(4, 16, 1, seed=0) + rows(0, 0, 8)
    for other in (copy.copy(mem), copy.deepcopy(mem), mem[2:5]):
        assert type(other.lock) is type(mem.lock) and other.lock is not mem.lock
    with mem.lock:  # re-entrant: a call made while holding the lock goes through
        mem + rows(0, 8, 2)
        assert len(mem) == 10 and len(mem[::2]) == 5
    twin = copy.deepcopy(mem)
    assert torch.equal(twin.sample()[1], mem.sample()[1]) and torch.equal(twin.memory['a'], mem.memory['a'])
