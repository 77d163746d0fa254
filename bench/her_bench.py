"""Hindsight replay on bit flipping: SB3's DQN with SB3's `HerReplayBuffer` against the same DQN with ours, same run.

Bit flipping with `n_bits` bits (SB3's `BitFlippingEnv`, discrete actions, episodes of `n_bits` steps) gives reward 0
only at the goal, so DQN without relabelling almost never learns it. Each library's buffer runs under SB3's own DQN with
the settings of SB3's `test_performance_her` (Adam 2e-3, batches of 32, a gradient step per environment step, 20
warm-up steps, target update every 100 steps, exploration down to 0.02, `n_sampled_goal=5`, 'future'), one
environment, torch on one thread. Runs are interleaved seed by seed ('sb3', 'ours', then 'none': SB3's
`DictReplayBuffer`, no relabelling) so the load of a shared machine falls on all alike. Each run reports the success
rate of its last 50 training episodes, the success rate of 50 greedy episodes after training, and the environment
steps per second of `learn` (wall clock and process CPU time). The memory cost is counted apart: the bytes of the arrays
a full `HerReplayBuffer` / `DictReplayBuffer` of `capacity` transitions holds, per transition (each array's memory
once, info dicts included), and those of the memories our `dqn_learner` makes for the same task, with and without HER.

    python bench/her_bench.py --seeds 0 1 2 --steps 6000 --out bench/stored/15_her.json
    python bench/her_bench.py --quick            # 1 seed, 600 steps, 8 bits
    python bench/her_bench.py --learners --seeds 0 1 2 3 4 --out bench/stored/15_her.json  # our DQN, SAC, TD3
    python bench/her_bench.py --versus --seeds 0 1 2 3 4 --out bench/stored/15_her.json  # SB3's agents against ours
    python bench/her_bench.py --bytes-only --out bench/stored/15_her.json  # the bytes per transition alone
"""
import argparse, json, os, resource, statistics, sys, time
from types import SimpleNamespace
from pathlib import Path
from machine import machine_record  # first: the load average as the run starts
import gymnasium as gym, numpy as np, torch
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from stable_baselines3 import DQN
from stable_baselines3.common.buffers import DictReplayBuffer as SB3Dict
from stable_baselines3.common.envs import BitFlippingEnv
from stable_baselines3.common.vec_env import DummyVecEnv
from stable_baselines3.her.her_replay_buffer import HerReplayBuffer as SB3Her
from fastrl_replay.compat.sb3 import HerReplayBuffer as OurHer, DictReplayBuffer as OurDict

LIBS = {'sb3': SB3Her, 'ours': OurHer, 'none': SB3Dict}

def env_fn(n_bits): return lambda: BitFlippingEnv(n_bits=n_bits, continuous=False)

def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

def run(lib:str, seed:int, steps:int, n_bits:int) -> dict:
    "One DQN run with `lib`'s buffer: training success, greedy success and steps per second"
    torch.set_num_threads(1)
    env = DummyVecEnv([env_fn(n_bits)])
    kw = {} if lib == 'none' else dict(replay_buffer_kwargs=dict(n_sampled_goal=5, goal_selection_strategy='future'))
    model = DQN('MultiInputPolicy', env, replay_buffer_class=LIBS[lib], learning_rate=2e-3, train_freq=1,
                gradient_steps=1, learning_starts=20, exploration_final_eps=0.02, target_update_interval=100, seed=seed,
                batch_size=32, buffer_size=100_000, stats_window_size=50, device='cpu', **kw)
    w, c = time.perf_counter(), cpu_s()
    model.learn(total_timesteps=steps)
    w, c = time.perf_counter() - w, cpu_s() - c
    ev, ok = BitFlippingEnv(n_bits=n_bits, continuous=False), 0
    ev.reset(seed=10_000 + seed)
    for _ in range(50):
        obs, _ = ev.reset(); done = False
        while not done:
            obs, r, term, trunc, info = ev.step(model.predict(obs, deterministic=True)[0])
            done = term or trunc
        ok += bool(info.get('is_success', r == 0))
    return dict(lib=lib, seed=seed, steps=steps, n_bits=n_bits, train_success=float(np.mean(model.ep_success_buffer)),
                greedy_success=ok / 50, steps_per_s_wall=steps / w, steps_per_s_cpu=steps / c, wall_s=w)

def _arrays(d) -> list:
    "The arrays and tensors in nested dicts, lists and tuples `d`"
    if isinstance(d, (np.ndarray, torch.Tensor)): return [d]
    vals = d.values() if isinstance(d, dict) else d if isinstance(d, (list, tuple)) else ()
    return [a for v in vals for a in _arrays(v)]

def _nbytes(*objs) -> int:
    "Bytes of the arrays and tensors the attributes of `objs` hold (one level into dicts), memory shared counted once"
    spans, extra = [], 0  # (address, bytes) of each array's memory; the Python objects of object arrays
    for obj in objs:
        vals = list(vars(obj).values())
        for v in vals + [x for v in vals if isinstance(v, dict) for x in v.values()]:
            if isinstance(v, torch.Tensor): spans.append((v.untyped_storage().data_ptr(), v.untyped_storage().nbytes()))
            elif isinstance(v, np.ndarray):
                root = v
                while isinstance(root.base, np.ndarray): root = root.base
                spans.append((root.__array_interface__['data'][0], root.nbytes))
                if v.dtype == object: extra += sum(sys.getsizeof(x) for x in v.ravel())  # SB3's info dicts
    total, end = 0, 0
    for start, n in sorted(spans):  # their union: a NumPy view of a tensor's memory counts once
        total += max(start + n - max(start, end), 0)
        end = max(end, start + n)
    return total + extra

def core_bytes(memory, *more) -> int:
    "Bytes of a core memory's arrays (its storage's state's, its sampler's and a base sampler's), and of `more`"
    sp = memory.sampler
    rows = SimpleNamespace(**{str(i): a for i, a in enumerate(_arrays(memory.storage.state_dict()))})
    return _nbytes(rows, sp, *([sp.base] if 'base' in vars(sp) else []), *more)

def bytes_per_transition(cls, capacity:int, n_bits:int) -> float:
    "Bytes per transition of a full buffer of `capacity` bit-flipping transitions: its arrays, info dicts included"
    venv = DummyVecEnv([env_fn(n_bits)])
    kw = dict(env=venv) if cls in (SB3Her, OurHer) else {}
    rb = cls(capacity, venv.observation_space, venv.action_space, device='cpu', **kw)
    if not hasattr(rb, 'replay'): return _nbytes(rb) / capacity
    return core_bytes(rb.replay, SimpleNamespace(infos=getattr(rb, 'infos', None))) / capacity

def learner_bytes(her:bool, capacity:int, n_bits:int) -> float:
    "Bytes per transition of the memory our `dqn_learner` makes for bit flipping (`BitFlip-v0`), with or without HER"
    from fastrl_replay.agents.dqn import dqn_learner
    from fastrl_replay.envs.goal import BIT_FLIP
    relabel = dict(strategy='future', n_sampled_goal=4) if her else None
    learn = dqn_learner(gym.make(BIT_FLIP, n_bits=n_bits), n_steps=1 if her else None, steps_per_epoch=100,
                        replay=dict(max_sz=capacity, her=relabel), valid=dict(n_episodes=0))
    memory = learn.experience_replay.memory
    memory + learn.dls.train.dataset.batch(1)  # a column storage allocates its columns with the first batch
    return core_bytes(memory) / memory.max_sz

MEMORIES = (('sb3_her', SB3Her), ('ours_her', OurHer), ('sb3_dict', SB3Dict), ('ours_dict', OurDict))

def memory_bytes(capacity:int, n_bits:int) -> dict:
    "Bytes per transition of each buffer of `MEMORIES`, and of our learner's memories without and with HER"
    mem = {name: bytes_per_transition(cls, capacity, n_bits) for name, cls in MEMORIES}
    return mem | {f'ours_learner_{k}': learner_bytes(k == 'her', capacity, n_bits) for k in ('dict', 'her')}

NAMES = dict(sb3="SB3's `HerReplayBuffer`", ours='ours (`fastrl_replay.compat.sb3.HerReplayBuffer`)',
             none="none (SB3's `DictReplayBuffer`, no relabelling)")

def bytes_text(capacity:int, n_bits:int, mem:dict) -> str:
    "The paragraph of the page that gives the bytes per transition of each memory"
    b = {k: f'{v:.0f}' for k, v in mem.items()}
    text = (f"Bytes per transition: the arrays of a full memory of {capacity:,} transitions of {n_bits}-bit flipping "
            f"(a Dict observation of {3 * n_bits} bytes), each array counted once (`--bytes-only` measures them "
            f"alone). SB3's `DictReplayBuffer` {b['sb3_dict']}: each observation twice, the action (int64), and the "
            f"reward, done and timeout as float32. Ours {b['ours_dict']}: the same observations, action and reward, "
            "done and timeout as int8 flags, side by side in one block of rows, and nothing per row in its sampler "
            f"(SB3's buffers take no TD errors back). SB3's `HerReplayBuffer` {b['sb3_her']}: its `DictReplayBuffer`'s "
            f"arrays, two int64 episode arrays and an info dict per transition; ours {b['ours_her']}: the columns of "
            "ours without HER and three int64 of episode bookkeeping per row, info dicts only with `copy_info_dict`.")
    if 'ours_learner_dict' in mem:
        text += (f" Our own `dqn_learner` stores what its data loop gives each transition: {b['ours_learner_dict']} "
                 f"without HER (three-step transitions: both observations, the action, reward and discount, three end "
                 "flags, the episode, step and environment ids as int64, and per row the sampler's TD error, hand-out "
                 f"mark and int32 write generation), {b['ours_learner_her']} with HER (the same and the episode "
                 "bookkeeping).")
    return text

def page(settings:dict, runs:list, summary:dict, mem:dict) -> dict:
    "The title, date, command and text (markdown) of the result on the benchmarks page"
    a = settings
    rows = ['| buffer | training success (last 50 episodes) | greedy success (50 episodes) | steps/s, wall (median) '
            '| steps/s, CPU (median) | bytes per transition |', '|---|---:|---:|---:|---:|---:|']
    for lib, s in summary.items():
        if lib not in NAMES: continue
        b = mem.get(f'{"sb3_dict" if lib == "none" else lib + "_her"}')
        rows.append(f"| {NAMES[lib]} | {s['train_success']:.2f} | {s['greedy_success']:.2f} | "
                    f"{s['steps_per_s_wall_median']:.0f} | {s['steps_per_s_cpu_median']:.0f} | {b:.0f} |")
    per_seed = '; '.join(f"{r['lib']} seed {r['seed']}: {r['train_success']:.2f} / {r['greedy_success']:.2f}"
                         for r in runs)
    text = (f"Bit flipping with {a['n_bits']} bits (SB3's `BitFlippingEnv`, reward 0 only at the goal), SB3's DQN with "
            f"the settings of SB3's `test_performance_her`, {a['steps']:,} steps, seeds "
            f"{', '.join(map(str, a['seeds']))}, one torch thread; HER with 'future' goals, 5 sampled per transition."
            '\n\n' + '\n'.join(rows) + f"\n\nPer run, training / greedy success: {per_seed}.")
    if 'speed_ratio_ours_over_sb3_cpu' in summary:
        text += (f"\n\nOurs over SB3's speed: {summary['speed_ratio_ours_over_sb3_cpu']:.2f}x in CPU time, "
                 f"{summary['speed_ratio_ours_over_sb3_wall']:.2f}x in wall-clock, all of it DQN and environment as "
                 'well as the buffer.')
    text += '\n\n' + bytes_text(a['capacity'], a['n_bits'], mem)
    return dict(title="Hindsight replay on bit flipping: SB3's DQN with SB3's HerReplayBuffer and with ours",
                date=time.strftime('%Y-%m-%d'), text=text,
                command=f"python bench/her_bench.py --seeds {' '.join(map(str, a['seeds']))} --steps {a['steps']} "
                        f"--n-bits {a['n_bits']} --out bench/stored/15_her.json")


LEARNERS = 'dqn', 'sac', 'td3'  # our own learners, trained with `replay=dict(her=...)` from their data loop

def learner_run(algo:str, her:bool, seed:int, steps:int, n_bits:int) -> dict:
    "Our `dqn_learner` on bit flipping, or `sac_learner`/`td3_learner` on PointGoal-v0, with or without HER"
    from fastrl_replay.agents.dqn import dqn_learner
    from fastrl_replay.agents.sac import sac_learner
    from fastrl_replay.agents.td3 import td3_learner
    from fastrl_replay.agents.nets import obs_batch
    from fastrl_replay.envs.goal import BIT_FLIP, POINT_GOAL
    torch.set_num_threads(1)
    relabel = dict(strategy='future', n_sampled_goal=4) if her else None
    common = dict(seed=seed, steps_per_epoch=steps, gamma=0.95, valid=dict(n_episodes=0))
    if algo == 'dqn':
        env, kw = (BIT_FLIP, dict(n_bits=n_bits)), dict(n_bits=n_bits)
        learn = dqn_learner(gym.make(BIT_FLIP, n_bits=n_bits), n_steps=1, optim=dict(lr=1e-3, train_every=1),
                            replay=dict(bs=32, warmup_sz=100, max_sz=100_000, her=relabel),
                            net=dict(target_sync=500), explore=dict(eps_end=0.02, eps_steps=steps // 10), **common)
        act = lambda o: int(learn.model(obs_batch(o)).argmax())
    else:
        env, kw = (POINT_GOAL, {}), {}
        learn = dict(sac=sac_learner, td3=td3_learner)[algo](POINT_GOAL, optim=dict(lr=1e-3), net=dict(hidden=(64, 64)),
                                                             replay=dict(bs=128, warmup_sz=500, her=relabel), **common)
        act = lambda o: learn.model.scale.to_env(learn.model.actor(obs_batch(o))).reshape(-1).numpy()
    w, c = time.perf_counter(), cpu_s()
    with learn.no_bar(), learn.no_logging(): learn.fit(1)
    w, c = time.perf_counter() - w, cpu_s() - c
    e, ok = gym.make(env[0], **kw), 0
    e.reset(seed=10_000 + seed)
    for _ in range(50):
        o, _ = e.reset(); done = False
        while not done:
            with torch.inference_mode(): o, r, te, tr, info = e.step(act(o))
            done = te or tr
        ok += bool(info['is_success'])
    task = f'{n_bits}-bit flipping' if algo == 'dqn' else 'PointGoal-v0'
    return dict(algo=algo, her=her, seed=seed, steps=steps, task=task, greedy_success=ok / 50,
                train_episodes=learn.dls.train.dataset.stats().episodes, wall_s=w, cpu_s=c)

def learners_section(a, runs:list) -> dict:
    "The section of our own learners' runs: success per seed, mean per (learner, hindsight), and its text"
    rows, summary = ['| learner | task | steps | hindsight replay | greedy success, mean | per seed |',
                     '|---|---|---:|---|---:|---|'], {}
    for algo in dict.fromkeys(r['algo'] for r in runs):
        for her in (True, False):
            rs = [r for r in runs if r['algo'] == algo and r['her'] == her]
            if not rs: continue
            m = statistics.mean(r['greedy_success'] for r in rs)
            summary[f"{algo}_{'her' if her else 'none'}"] = m
            per_seed = ', '.join(f"{r['greedy_success']:.2f}" for r in rs)
            rows.append(f"| `{algo}_learner` | {rs[0]['task']} | {rs[0]['steps']:,} | {'yes' if her else 'no'} | "
                        f"{m:.2f} | {per_seed} |")
    text = ("Our own learners trained with hindsight replay set in their replay settings "
            "(`replay=dict(her=dict(strategy='future', n_sampled_goal=4))`), the relabelling fed by the data loop, "
            f"against the same learners without it, seeds {', '.join(map(str, a.seeds))}: the success rate of 50 "
            f"greedy episodes after training. DQN on {a.n_bits}-bit flipping (`BitFlip-v0`, random starts and goals), "
            f"{a.dqn_steps:,} steps, a gradient step per step, batches of 32; SAC and TD3 on `PointGoal-v0` (a "
            f"point reaching a goal in the square, 50-step episodes), {a.ac_steps:,} steps, batches of 128, (64, 64) "
            "networks; gamma 0.95, one torch thread.\n\n" + '\n'.join(rows))
    return dict(title='Hindsight replay in our own DQN, SAC and TD3 learners', date=time.strftime('%Y-%m-%d'),
                text=text, runs=runs, summary=summary, settings=dict(seeds=a.seeds, n_bits=a.n_bits,
                dqn_steps=a.dqn_steps, ac_steps=a.ac_steps, algos=a.algos),
                command=f"python bench/her_bench.py --learners --seeds {' '.join(map(str, a.seeds))} --n-bits "
                        f"{a.n_bits} --dqn-steps {a.dqn_steps} --ac-steps {a.ac_steps} --out bench/stored/15_her.json",
                machine=machine_record(torch_threads=1))

def learners_main(a):
    "Train each learner with and without hindsight replay, seed by seed; add the `learners` section to `a.out`"
    runs = []
    for s in a.seeds:
        for algo in a.algos:
            for her in (True, False):
                steps = a.dqn_steps if algo == 'dqn' else a.ac_steps
                runs.append(learner_run(algo, her, s, steps, a.n_bits)); print(json.dumps(runs[-1]), flush=True)
    section = learners_section(a, runs)
    print(section['text'])
    if a.out:  # the other sections as they are now
        res = json.loads(a.out.read_text()) if a.out.exists() else {}
        a.out.write_text(json.dumps(res | dict(learners=section), indent=1) + '\n')


class SuccessLog(gym.Wrapper):
    "Records `info['is_success']` at the end of each episode: the training success of either side, counted alike"
    def __init__(self, env:gym.Env): super().__init__(env); self.successes = []
    def step(self, action):
        o, r, te, tr, info = self.env.step(action)
        if te or tr: self.successes.append(bool(info['is_success']))
        return o, r, te, tr, info

# The settings given to both sides: DQN as in the first section, SAC as the `--learners` mode
VS_DQN = dict(n_bits=15, hidden=(64, 64), lr=2e-3, bs=32, warmup=20, target_every=100, eps_end=0.02,
              eps_fraction=0.1, gamma=0.99, max_grad_norm=10., buffer=100_000, n_sampled_goal=4)
VS_SAC = dict(hidden=(64, 64), lr=1e-3, bs=128, warmup=500, gamma=0.95, tau=0.005, buffer=100_000, n_sampled_goal=4)

def vs_task(algo:str, n_bits:int) -> gym.Env:
    "The task both sides train on: SB3's `BitFlippingEnv` (DQN), our `PointGoal-v0` (SAC), logging successes"
    from fastrl_replay.envs.goal import POINT_GOAL
    return SuccessLog(BitFlippingEnv(n_bits=n_bits, continuous=False) if algo == 'dqn' else gym.make(POINT_GOAL))

def sb3_model(algo:str, env:gym.Env, seed:int, steps:int):
    "SB3's DQN or SAC with SB3's `HerReplayBuffer` on `env`, the settings `VS_DQN` / `VS_SAC` give"
    from stable_baselines3 import SAC
    s = VS_DQN if algo == 'dqn' else VS_SAC
    her = dict(replay_buffer_class=SB3Her, replay_buffer_kwargs=dict(n_sampled_goal=s['n_sampled_goal'],
                                                                      goal_selection_strategy='future'))
    common = dict(policy_kwargs=dict(net_arch=list(s['hidden'])), learning_rate=s['lr'], batch_size=s['bs'],
                  learning_starts=s['warmup'], gamma=s['gamma'], buffer_size=s['buffer'], train_freq=1,
                  gradient_steps=1, seed=seed, device='cpu', stats_window_size=50, **her)
    venv = DummyVecEnv([lambda: env])
    if algo == 'sac': return SAC('MultiInputPolicy', venv, tau=s['tau'], ent_coef='auto', **common)
    return DQN('MultiInputPolicy', venv, target_update_interval=s['target_every'], exploration_initial_eps=1.,
               exploration_final_eps=s['eps_end'], exploration_fraction=s['eps_fraction'],
               max_grad_norm=s['max_grad_norm'], **common)

def our_learner(algo:str, env:gym.Env, seed:int, steps:int):
    "Our `dqn_learner` or `sac_learner` with hindsight replay on `env`, the settings `VS_DQN` / `VS_SAC` give"
    from fastrl_replay.agents.dqn import dqn_learner
    from fastrl_replay.agents.sac import sac_learner
    s = VS_DQN if algo == 'dqn' else VS_SAC
    replay = dict(bs=s['bs'], warmup_sz=s['warmup'], max_sz=s['buffer'],
                  her=dict(strategy='future', n_sampled_goal=s['n_sampled_goal']))
    common = dict(seed=seed, steps_per_epoch=steps, gamma=s['gamma'], n_steps=1, valid=dict(n_episodes=0),
                  replay=replay)
    if algo == 'sac':
        return sac_learner(env, optim=dict(lr=s['lr'], train_every=1, grad_steps=1),
                           net=dict(hidden=s['hidden'], tau=s['tau']), entropy=dict(coef='auto', init=1.), **common)
    return dqn_learner(env, optim=dict(lr=s['lr'], train_every=1, grad_steps=1, max_grad_norm=s['max_grad_norm']),
                       net=dict(hidden=s['hidden'], double=False, target_sync=s['target_every']),
                       explore=dict(eps_start=1., eps_end=s['eps_end'], eps_steps=int(s['eps_fraction'] * steps)),
                       **common)

def greedy_act(side:str, algo:str, model):
    "The side's greedy action for one observation"
    from fastrl_replay.agents.nets import obs_batch
    if side == 'sb3': return lambda o: model.predict(o, deterministic=True)[0]
    m = model.model
    if algo == 'dqn': return lambda o: int(m(obs_batch(o)).argmax())
    return lambda o: m.scale.to_env(m.actor(obs_batch(o))).reshape(-1).numpy()

def versus_run(side:str, algo:str, seed:int, steps:int) -> dict:
    "One side's training run: training and greedy success, environment steps per second (wall clock and CPU)"
    torch.set_num_threads(1)
    env = vs_task(algo, VS_DQN['n_bits'])
    model = (sb3_model if side == 'sb3' else our_learner)(algo, env, seed, steps)
    w, c = time.perf_counter(), cpu_s()
    if side == 'sb3': model.learn(total_timesteps=steps)
    else:
        with model.no_bar(), model.no_logging(): model.fit(1)
    w, c = time.perf_counter() - w, cpu_s() - c
    act, ev, ok = greedy_act(side, algo, model), vs_task(algo, VS_DQN['n_bits']), 0
    ev.reset(seed=10_000 + seed)
    for _ in range(50):
        o, _ = ev.reset(); done = False
        while not done:
            with torch.inference_mode(): o, r, te, tr, info = ev.step(act(o))
            done = te or tr
        ok += bool(info['is_success'])
    return dict(side=side, algo=algo, seed=seed, steps=steps, train_success=float(np.mean(env.successes[-50:])),
                train_episodes=len(env.successes), greedy_success=ok / 50, steps_per_s_wall=steps / w,
                steps_per_s_cpu=steps / c, wall_s=w, cpu_s=c)

VS_NAMES = dict(dqn=("DQN, 15-bit flipping (SB3's `BitFlippingEnv`)", "SB3's `DQN`", '`dqn_learner`'),
                sac=('SAC, `PointGoal-v0`', "SB3's `SAC`", '`sac_learner`'))
VERSUS_HEAD = "\n\n### Learner against learner: SB3's DQN and SAC with SB3's HER against our learners"

def versus_section(a, runs:list) -> dict:
    "The section of the versus runs: per seed and side, success and speed; the ratio ours/SB3 per seed; its text"
    rows = ['| task | seed | side | training success (last 50 episodes) | greedy success (50 episodes) | '
            'steps/s, wall | steps/s, CPU | ours/SB3, wall | ours/SB3, CPU |',
            '|---|---:|---|---:|---:|---:|---:|---:|---:|']
    summary = {}
    for algo in dict.fromkeys(r['algo'] for r in runs):
        task, sb3_name, our_name = VS_NAMES[algo]
        pairs = [(r, o) for r in runs for o in runs if r['algo'] == o['algo'] == algo and r['seed'] == o['seed']
                 and r['side'] == 'sb3' and o['side'] == 'ours']
        for s, o in pairs:
            rw, rc = o['steps_per_s_wall'] / s['steps_per_s_wall'], o['steps_per_s_cpu'] / s['steps_per_s_cpu']
            o |= dict(ratio_wall=rw, ratio_cpu=rc)
            for r, name, ratio in ((s, sb3_name, ('', '')), (o, our_name, (f'{rw:.2f}x', f'{rc:.2f}x'))):
                rows.append(f"| {task} | {r['seed']} | {name} | {r['train_success']:.2f} | {r['greedy_success']:.2f} | "
                            f"{r['steps_per_s_wall']:.0f} | {r['steps_per_s_cpu']:.0f} | {ratio[0]} | {ratio[1]} |")
        for side in ('sb3', 'ours'):
            rs = [r for r in runs if r['algo'] == algo and r['side'] == side]
            summary[f'{algo}_{side}'] = {k: statistics.mean(r[k] for r in rs)
                                         for k in ('train_success', 'greedy_success')}
            summary[f'{algo}_{side}'] |= {f'{k}_median': statistics.median(r[k] for r in rs)
                                          for k in ('steps_per_s_wall', 'steps_per_s_cpu')}
        for t in ('wall', 'cpu'):
            summary[f'{algo}_ratio_{t}_median'] = statistics.median(o[f'ratio_{t}'] for _, o in pairs)
    means = ['| task | side | training success, mean | greedy success, mean | steps/s wall, median | '
             'steps/s CPU, median | ours/SB3 wall, median | ours/SB3 CPU, median |',
             '|---|---|---:|---:|---:|---:|---:|---:|']
    for algo in dict.fromkeys(r['algo'] for r in runs):
        for side, name in (('sb3', VS_NAMES[algo][1]), ('ours', VS_NAMES[algo][2])):
            m, ours = summary[f'{algo}_{side}'], side == 'ours'
            ratios = ((f"{summary[f'{algo}_ratio_wall_median']:.2f}x", f"{summary[f'{algo}_ratio_cpu_median']:.2f}x")
                      if ours else ('', ''))
            means.append(f"| {VS_NAMES[algo][0]} | {name} | {m['train_success']:.2f} | {m['greedy_success']:.2f} | "
                         f"{m['steps_per_s_wall_median']:.0f} | {m['steps_per_s_cpu_median']:.0f} | {ratios[0]} | "
                         f"{ratios[1]} |")
    d, c = VS_DQN, VS_SAC
    command = (f"python bench/her_bench.py --versus --seeds {' '.join(map(str, a.seeds))} --sac-seeds "
               f"{' '.join(map(str, a.sac_seeds))} --dqn-steps {a.dqn_steps} --ac-steps {a.ac_steps} "
               '--out bench/stored/15_her.json')
    machine = machine_record('stable-baselines3', torch_threads=1)
    text = (f"Measured {time.strftime('%Y-%m-%d')} with `{command}` (1-minute load average "
            f"{machine['load']['start']:g} → {machine['load']['end']:g}: the machine shared with other jobs, so "
            "compare the CPU figures). Each side trains its own agent with its own hindsight replay on the same task, "
            "runs interleaved seed by seed (SB3, then ours), torch on one thread; success counted alike on both sides "
            "(the task's `is_success` at each episode's end), greedy success over 50 episodes of a task seeded "
            "10,000 + seed; "
            "steps/s: environment steps per second of the training call (`learn` / `fit`), wall clock and process "
            f"CPU time.\n\nDQN on 15-bit flipping (SB3's `BitFlippingEnv`, fixed all-ones goal, episodes of 15 steps, "
            f"reward -1 a step and 0 at the goal) for both, {a.dqn_steps:,} steps, seeds "
            f"{', '.join(map(str, a.seeds))}: ({', '.join(map(str, d['hidden']))}) MLP on the three keys side by "
            f"side, Adam {d['lr']:g}, batches of {d['bs']}, a gradient step per step, {d['warmup']} warm-up steps "
            f"acted at random, a hard target copy every {d['target_every']} steps, epsilon 1 → {d['eps_end']} over "
            f"the first {d['eps_fraction']:.0%} of the steps, gamma {d['gamma']}, one-step returns, Huber loss, "
            f"gradients clipped to norm {d['max_grad_norm']:g}, no double DQN (SB3 has none: `net=dict("
            f"double=False)` for ours), 'future' goals, {d['n_sampled_goal']} relabelled per stored (4/5 of each "
            f"batch). SAC on `PointGoal-v0` for both, {a.ac_steps:,} steps, seeds {', '.join(map(str, a.sac_seeds))}: "
            f"({', '.join(map(str, c['hidden']))}) networks, Adam {c['lr']:g}, batches of {c['bs']}, {c['warmup']} "
            f"warm-up steps at random, tau {c['tau']}, gamma {c['gamma']}, a gradient step per step, entropy "
            f"coefficient tuned from 1 toward minus the action dimensions, 'future' goals, {c['n_sampled_goal']} "
            f"relabelled per stored.\n\nNot matched: {VS_UNMATCHED}\n\n" + '\n'.join(means) + '\n\nPer seed:\n\n'
            + '\n'.join(rows))
    return dict(title="SB3's DQN and SAC with SB3's HER against our learners with ours", date=time.strftime('%Y-%m-%d'),
                text=text, runs=runs, summary=summary, settings=dict(seeds=a.seeds, sac_seeds=a.sac_seeds,
                dqn_steps=a.dqn_steps, ac_steps=a.ac_steps, dqn=VS_DQN, sac=VS_SAC), command=command,
                machine=machine)

VS_UNMATCHED = (
    "SB3 counts its target update interval in environment steps from the first one, ours in gradient steps (the "
    "copies fall 20 steps apart); SB3 relabels from whole episodes only, ours also from the episode under way; "
    "SB3's DQN and SAC act at random for their warm-up steps and ours until the memory holds as many; ours "
    "steps a vector of one environment (gymnasium's, resetting in the same step), SB3 its `DummyVecEnv`; the "
    "networks' initial weights differ (each library's own initialisation and seeding); SAC: SB3 clips the "
    "actor's log-std to [-20, 2], ours as its nets do, and SB3 has three Adam optimizers where ours has one "
    "over all parameters (the same per-parameter updates).")

def with_versus(res:dict, section:dict|None) -> dict:
    "`res` with `section` as its `versus` (if given), its text and machines ending with the versus section's"
    section = section or res.get('versus')
    if section is None: return res
    machines = res.get('machine') if isinstance(res.get('machine'), list) else [res.get('machine')]
    return res | dict(versus=section, text=res.get('text', '').split(VERSUS_HEAD)[0] + VERSUS_HEAD + '\n\n'
                      + section['text'], machine=[machines[0], section['machine']])

def versus_main(a):
    "SB3's DQN and SAC with SB3's HER against ours, interleaved seed by seed; add the `versus` section to `a.out`"
    for algo in ('dqn', 'sac'):  # untimed: the imports and compilations of each side's first run
        for side in ('sb3', 'ours'): versus_run(side, algo, 0, 600)
    runs = []
    for s in dict.fromkeys(a.seeds + a.sac_seeds):
        for algo in ('dqn', 'sac'):
            if s not in (a.seeds if algo == 'dqn' else a.sac_seeds): continue
            for side in ('sb3', 'ours'):
                runs.append(versus_run(side, algo, s, a.dqn_steps if algo == 'dqn' else a.ac_steps))
                print(json.dumps(runs[-1]), flush=True)
    section = versus_section(a, runs)
    print(section['text'])
    if a.out:  # the other sections as they are now
        res = json.loads(a.out.read_text()) if a.out.exists() else {}
        a.out.write_text(json.dumps(with_versus(res, section), indent=1) + '\n')

def bytes_main(a):
    "Measure only the bytes per transition; store them in `a.out` with its page text remade from its stored runs"
    res = json.loads(a.out.read_text()) if a.out and a.out.exists() else {}
    s = res.get('settings', {})
    mem = memory_bytes(s.get('capacity', a.capacity), s.get('n_bits', a.n_bits))  # the stored text's settings
    print(json.dumps(mem, indent=1))
    if not a.out: return
    res['bytes_per_transition'] = mem
    if 'runs' in res: res = with_versus(res | dict(text=page(s, res['runs'], res['summary'], mem)['text']), None)
    a.out.write_text(json.dumps(res, indent=1) + '\n')

def main():
    p = argparse.ArgumentParser()
    p.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    p.add_argument('--steps', type=int, default=6000)
    p.add_argument('--n-bits', type=int, default=15)
    p.add_argument('--capacity', type=int, default=20_000)
    p.add_argument('--libs', nargs='+', default=list(LIBS))
    p.add_argument('--quick', action='store_true')
    p.add_argument('--out', type=Path, default=None)
    p.add_argument('--learners', action='store_true', help="our own learners with and without HER, not SB3's DQN")
    p.add_argument('--algos', nargs='+', default=list(LEARNERS))
    p.add_argument('--dqn-steps', type=int, default=6000)
    p.add_argument('--ac-steps', type=int, default=3000)
    p.add_argument('--versus', action='store_true', help="SB3's DQN and SAC with SB3's HER against our learners")
    p.add_argument('--sac-seeds', type=int, nargs='+', default=[0, 1, 2])
    p.add_argument('--bytes-only', action='store_true',
                   help="only the bytes per transition, into --out and its text (at its stored capacity and bits)")
    a = p.parse_args()
    if a.bytes_only: return bytes_main(a)
    if a.learners: return learners_main(a)
    if a.versus: return versus_main(a)
    if a.quick: a.seeds, a.steps, a.n_bits, a.capacity = [0], 600, 8, 2000
    runs = []
    for s in a.seeds:
        for lib in a.libs:
            runs.append(run(lib, s, a.steps, a.n_bits)); print(json.dumps(runs[-1]), flush=True)
    mem = memory_bytes(a.capacity, a.n_bits)
    by = lambda lib, k: [r[k] for r in runs if r['lib'] == lib]
    summary = {lib: dict(train_success=statistics.mean(by(lib, 'train_success')),
                         greedy_success=statistics.mean(by(lib, 'greedy_success')),
                         steps_per_s_wall_median=statistics.median(by(lib, 'steps_per_s_wall')),
                         steps_per_s_cpu_median=statistics.median(by(lib, 'steps_per_s_cpu'))) for lib in a.libs}
    if 'sb3' in a.libs and 'ours' in a.libs:
        for t in ('cpu', 'wall'):
            o, s = summary['ours'][f'steps_per_s_{t}_median'], summary['sb3'][f'steps_per_s_{t}_median']
            summary[f'speed_ratio_ours_over_sb3_{t}'] = o / s
    res = dict(bench='her_bitflip', settings=vars(a) | {'out': str(a.out)}, runs=runs, bytes_per_transition=mem,
               summary=summary, machine=machine_record('stable-baselines3', torch_threads=1))
    res |= page(res['settings'], runs, summary, mem)
    print(json.dumps(dict(summary=summary, bytes_per_transition=mem), indent=1))
    if a.out:  # with the sections of the other modes as they are now
        old = json.loads(a.out.read_text()) if a.out.exists() else {}
        res = with_versus(res | {k: old[k] for k in ('learners', 'versus') if k in old}, None)
        a.out.write_text(json.dumps(res, indent=1) + '\n')

if __name__ == '__main__': main()
