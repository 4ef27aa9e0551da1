"""Who held a configuration back when its wall-clock limit came: a culprit only when the heartbeats show one
(a rank silent, or without progress for a real interval while another went on); ranks a phase apart at that
instant, as ranks always are, are not blamed, and the sentence then says every rank was progressing."""
from __future__ import annotations

from bench.shared import heartbeat
from bench.shared.heartbeat import RankState, Watch
from bench.sweep.launch import Limits


def _watch(states: dict, ranks: int = 2, advanced: float = None) -> Watch:
    w = Watch("/nonexistent", ranks, started=0.0)
    w.states = {r: RankState(dict(body, seq=1), seq_changed, progress_changed)
                for r, (body, seq_changed, progress_changed) in states.items()}
    w.advanced = advanced if advanced is not None else max(p for _, _, p in states.values())
    return w


def test_ranks_one_phase_apart_while_both_progress_are_not_a_culprit():
    # The case that was blamed: rank 1 one phase behind rank 0 at the instant of a fixed --timeout.
    now = 100.0
    w = _watch({0: ({"step": 1376, "phase": "start", "total": 2000}, now - 0.3, now - 0.2),
                1: ({"step": 1375, "phase": "backward", "total": 2000}, now - 0.3, now - 0.1)})
    assert w.at_limit(now, heartbeat.still_interval_s(0.06)) is None
    lim = Limits(fixed_s=30.0)
    w.first_step = (5.0, 1)
    text = lim.still_progressing(0.0, w, now=now)
    assert text.startswith("the limit was reached at step 1376 of 2000 with every rank progressing"), text
    assert "needs about" in text and "raise --timeout (more than" in text
    # the old rule named rank 1 all the same
    assert w.culprits(now)[0] == [1]


def test_a_rank_still_for_a_real_interval_while_another_goes_on_is_named_with_how_long():
    now = 100.0
    w = _watch({0: ({"step": 90, "phase": "forward", "host": "n1"}, now - 0.2, now - 0.1),
                1: ({"step": 40, "phase": "data", "host": "n2"}, now - 0.2, now - 42.0)})
    ranks, why = w.at_limit(now, heartbeat.still_interval_s(0.05))
    assert ranks == [1] and why == "rank 1 made no progress for 42 s after step 40 (data) on n2 while the others went on"


def test_the_interval_follows_long_steps():
    # A DeepLabV3 backward on a CPU holds one phase for seconds: 11 s without progress is not a stall at 4 s a step.
    now = 100.0
    w = _watch({0: ({"step": 5, "phase": "backward"}, now - 0.2, now - 11.0),
                1: ({"step": 5, "phase": "optimizer"}, now - 0.2, now - 0.5)})
    assert heartbeat.still_interval_s(4.0) == 12.0 and heartbeat.still_interval_s(None) == heartbeat.STILL_MIN_S
    assert w.at_limit(now, heartbeat.still_interval_s(4.0)) is None
    assert w.at_limit(now, heartbeat.still_interval_s(0.5)) == ([0], "rank 0 made no progress for 11 s after step 5 "
                                                                     "(backward) while the others went on")


def test_a_rank_done_and_waiting_for_a_slower_one_is_not_blamed():
    now = 100.0
    w = _watch({0: ({"step": 7, "phase": "gather"}, now - 0.2, now - 30.0),
                1: ({"step": 6, "phase": "forward"}, now - 0.2, now - 0.3)})
    assert w.at_limit(now, 10.0) is None


def test_silent_and_missing_ranks_and_a_real_stall_keep_their_names():
    now = 100.0
    frozen = _watch({0: ({"step": 3, "phase": "backward"}, now - 0.2, now - 40.0),
                     1: ({"step": 3, "phase": "start"}, now - 40.0, now - 40.0)})
    assert frozen.at_limit(now, 10.0)[0] == [1] and "stopped running" in frozen.at_limit(now, 10.0)[1]
    missing = _watch({0: ({"step": 3, "phase": "backward"}, now - 0.2, now - 0.2)})
    assert missing.at_limit(now, 10.0) == ([1], "rank 1 never reported progress (did not start, or died at once)")
    # nobody progressed for the interval: the one outside a collective is who the others wait for
    stall = _watch({0: ({"step": 2, "phase": "backward"}, now - 0.2, now - 80.0),
                    1: ({"step": 2, "phase": "start"}, now - 0.2, now - 80.0)})
    assert stall.at_limit(now, 10.0)[0] == [1]
    # every rank still compiling or setting up: the start-up allowance's business, not a culprit
    setup = _watch({0: ({"step": -1, "phase": "compile"}, now - 0.2, now - 60.0),
                    1: ({"step": -1, "phase": "compile"}, now - 0.2, now - 60.0)})
    assert setup.at_limit(now, 10.0) is None


def test_the_work_following_limit_names_the_flag_that_fixes_a_longer_one():
    now = 50.0
    w = _watch({0: ({"step": 9, "phase": "forward", "total": 40}, now - 0.2, now - 0.1)}, ranks=1, advanced=50.0)
    w.first_step = (10.0, 1)
    text = Limits(fixed_s=None).still_progressing(0.0, w, now=now)
    # steps 1 to 8 between 10 s and 50 s: 5 s a step; 10 s to the first step; 40 steps
    assert text == ("the limit was reached at step 10 of 40 with every rank progressing; at this pace the run needs "
                    "about 210 s in all; --timeout S sets a longer, fixed limit")


def test_a_stall_after_fast_steps_is_not_taken_for_slow_steps():
    # hang@1:2: two quick steps, then rank 1 stuck at the start of step 2 and rank 0 waiting in backward, for 60 s.
    # The pace comes from when the steps advanced, not from the time since: the interval stays 10 s, rank 1 is named.
    now = 100.0
    w = _watch({0: ({"step": 2, "phase": "backward", "total": 8}, now - 0.2, now - 60.0),
                1: ({"step": 2, "phase": "start", "total": 8}, now - 0.2, now - 60.0)}, advanced=now - 60.0)
    w.first_step = (now - 60.5, 1)
    step_s = Limits.step_s(w)
    assert step_s == 0.5 and heartbeat.still_interval_s(step_s) == heartbeat.STILL_MIN_S
    ranks, why = w.at_limit(now, heartbeat.still_interval_s(step_s))
    assert ranks == [1] and why.startswith("rank 1 made no progress after step 2 (start)"), why


def test_a_first_step_seen_late_gives_no_pace_until_steps_are_made_after_it(tmp_path):
    # The H200's compiled DeepLabV3: 74 s to the first step, then 50 ms steps, so one poll found step 4 begun. The pace
    # counted 3 steps from when it was seen and read '-0 s a step'; it counts from the steps then done.
    import json
    w = Watch(str(tmp_path), 1, started=0.0)

    def at(now: float, step: int) -> None:
        with open(heartbeat.path_for(str(tmp_path), 0), "w") as f:
            json.dump({"step": step, "phase": "forward", "total": 44, "seq": step}, f)
        w.poll(now)
    at(1.0, -1)
    at(75.0, 4)
    assert w.first_step == (75.0, 4) and Limits.step_s(w) is None
    assert Limits(fixed_s=None).projected_s(0.0, w) is None
    at(76.0, 24)
    assert abs(Limits.step_s(w) - 0.05) < 1e-9
    assert Limits(fixed_s=None).projected_s(0.0, w) == 75.0 + 44 * Limits.step_s(w)
