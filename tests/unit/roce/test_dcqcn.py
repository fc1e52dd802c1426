"""DCQCN reaction/notification point math against hand-computed sequences."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from roce_sim import make_pair, run

from emulator.engine.config import EngineConfig, for_host
from emulator.engine.paced import PacedQueuePair
from emulator.plan import compile_plan
from emulator.roce.dcqcn import PROFILES, NotificationPoint, Profile, ReactionPoint
from emulator.spec import load, parse

# A profile with round numbers so every step can be computed by hand.
P = Profile("test", g=0.5, alpha_period=1.0, alpha_init=1.0, reduce_period=0.0,
            increase_timer=10.0, byte_counter=1000, rate_ai=10.0, rate_hai=100.0, f=2,
            min_rate=1.0, cnp_interval=0.5)


def test_cnp_cuts_rate_by_half_alpha_and_raises_alpha():
    rp = ReactionPoint(P, line_rate=1000.0)
    rp.on_cnp(0.1)
    assert rp.rt == 1000.0 and rp.rc == 500.0  # alpha 1 -> Rc (1 - 1/2)
    assert rp.alpha == 1.0  # (1 - 0.5) * 1 + 0.5
    rp.on_cnp(0.2)
    assert rp.rt == 500.0 and rp.rc == 250.0


def test_alpha_decays_without_cnps():
    rp = ReactionPoint(P, line_rate=1000.0)
    rp.tick(3.0)  # three alpha periods, no CNP: 1 -> .5 -> .25 -> .125
    assert rp.alpha == pytest.approx(0.125)
    rp.on_cnp(3.5)  # alpha .125: Rc = 1000 * (1 - .0625)
    assert rp.rc == pytest.approx(937.5)


def test_fast_recovery_then_additive_then_hyper_increase():
    rp = ReactionPoint(P, line_rate=1000.0)
    rp.on_cnp(0.0)  # Rt 1000, Rc 500, alpha stays 1 (no decay before the tick below)
    rp.alpha = 1.0
    rp.rt, rp.rc = 400.0, 200.0  # pretend earlier cuts
    rp.tick(10.0)  # timer stage 1 (< F=2): fast recovery
    assert (rp.rt, rp.rc) == (400.0, 300.0)
    rp.on_sent(1000)  # byte stage 1; max(1, 1) = 1 < 2: fast recovery again
    assert rp.rc == 350.0
    rp.tick(20.0)  # t=2, b=1: additive, Rt += 10
    assert rp.rt == 410.0 and rp.rc == 380.0
    rp.on_sent(2000)  # b=2: t=2,b=2 additive (Rt 420, Rc 400); b=3: min 2 = F: additive
    assert rp.rt == 430.0 and rp.rc == pytest.approx(415.0)
    # t=30: stages (3, 3), min 3 > F: hyper, Rt 530, Rc (530 + 415) / 2 = 472.5
    # t=40: stages (4, 3), min 3 > F: hyper, Rt 630, Rc (630 + 472.5) / 2 = 551.25
    rp.tick(40.0)
    assert rp.rt == 630.0 and rp.rc == pytest.approx(551.25)


def test_rates_are_capped_and_floored():
    rp = ReactionPoint(P, line_rate=100.0)
    for i in range(50):
        rp.on_cnp(i * 0.01)
    assert rp.rc == 1.0  # min rate
    rp.tick(1000.0)
    assert rp.rc <= 100.0 and rp.rt <= 100.0


def test_nvidia_keeps_the_target_rate_on_cnp():
    p = PROFILES["nvidia"]
    rp = ReactionPoint(p, line_rate=100e9)
    rp.on_cnp(0.0)
    assert rp.rt == 100e9 and rp.rc < 100e9
    rp.tick(p.increase_timer)  # one fast-recovery stage: halfway back to the target
    assert rp.rc == pytest.approx((100e9 + 100e9 * (1 - p.alpha_init / 2)) / 2, rel=1e-3)


def test_nvidia_clamps_the_target_once_the_rate_has_risen():
    """clamp_tgt_rate_after_time_inc: a burst of cuts keeps Rt; a cut after an increase clamps it."""
    p = PROFILES["nvidia"]
    rp = ReactionPoint(p, line_rate=100e9)
    rp.on_cnp(0.0)
    rp.on_cnp(p.reduce_period)  # second cut of the burst, no increase in between
    assert rp.rt == 100e9 and rp.reductions == 2
    t = p.reduce_period + p.increase_timer
    rp.tick(t)  # one timer stage: Rc halfway back to Rt
    before = rp.rc
    rp.on_cnp(t + p.reduce_period)
    assert rp.rt == before  # clamped to the rate at the cut
    assert rp.rc == pytest.approx(before * (1 - rp.alpha / 2), rel=1e-2)


def test_a_byte_counter_stage_always_clamps():
    rp = ReactionPoint(replace(P, clamp_target=False), line_rate=1000.0)
    rp.on_cnp(0.0)
    assert rp.rt == 1000.0 and rp.rc == 500.0
    rp.on_sent(1000)  # byte stage: fast recovery to 750
    rp.on_cnp(0.1)
    assert rp.rt == 750.0 and rp.rc == 375.0


def test_reduce_period_limits_cuts():
    p = PROFILES["nvidia"]
    rp = ReactionPoint(p, line_rate=100e9)
    rp.on_cnp(0.0)
    rp.on_cnp(1e-6)  # within 4 us: counted, not applied
    assert rp.reductions == 1 and rp.cnps == 2


def test_dilation_stretches_timers_and_shrinks_rates():
    d = PROFILES["paper"].dilated(1000)
    assert d.increase_timer == pytest.approx(55e-3) and d.rate_ai == pytest.approx(40e3)
    assert d.byte_counter == PROFILES["paper"].byte_counter


def test_notification_point_one_cnp_per_interval():
    np_ = NotificationPoint(interval=0.5)
    sent = [np_.on_ce(t) for t in (0.0, 0.1, 0.49, 0.5, 0.6, 1.2)]
    assert sent == [True, False, False, True, False, True]


def _paced_write_time(limit_bps: float, rp: ReactionPoint | None, size: int = 200_000) -> float:
    """Simulated seconds a paced QP takes to WRITE `size` bytes over the simulated wire."""
    rng = random.Random(7)
    a, b = make_pair(rng)
    a.qp = PacedQueuePair(a.qp.config, a.memory, rp, limit_bps)
    sink = b.memory.register(bytearray(size))
    a.qp.post_write(1, rng.randbytes(size), sink.va, sink.rkey)
    return run(a, b, lambda: len(a.done) == 1)


def test_a_qp_rate_limit_paces_with_or_without_dcqcn():
    unpaced = _paced_write_time(0.0, None)
    alone = _paced_write_time(8e6, None)  # 200 kB at 8 Mbit/s: 0.2 s
    line = ReactionPoint(PROFILES["nvidia"], 100e6)  # DCQCN at 100 Mbit/s, never cut
    under_dcqcn = _paced_write_time(8e6, line)
    assert unpaced < 0.05
    assert alone == pytest.approx(0.2, rel=0.05) and under_dcqcn == pytest.approx(0.2, rel=0.05)
    frozen = replace(PROFILES["nvidia"], increase_timer=1e6, byte_counter=10**15)  # no recovery
    cut = ReactionPoint(frozen, 100e6)
    cut.rc = cut.rt = 4e6  # DCQCN below the limit: DCQCN's rate wins
    assert _paced_write_time(8e6, cut) > 0.3


def test_topology_overrides_reach_the_engines_profile_dilated():
    topo = load("topologies/clos-2x4-cc.yaml").model_dump(mode="json")
    topo["congestion"]["dcqcn"] |= {"overrides": {"rate_ai": "10M", "increase_timer": "55us",
                                                  "f": 5, "clamp_target": True}}
    plan = compile_plan(parse(topo, "cc.yaml"), "cc.yaml")
    config = EngineConfig.from_json(for_host(plan, plan.node("prefill1")).to_json())  # as shipped
    d = plan.congestion.dilation
    p = config.profile()
    assert (p.rate_ai, p.increase_timer, p.f, p.clamp_target) == pytest.approx(
        (10e6 / d, 55e-6 * d, 5, True))
    assert p.rate_hai == PROFILES["nvidia"].rate_hai / d  # the rest stays the profile's
    assert config.profile("paper") == PROFILES["paper"].dilated(d)  # overrides are nvidia's
