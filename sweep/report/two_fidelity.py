"""The two-fidelity section of a report (`sweep.fidelity`'s datasets): points screened and refined,
the calibration of the screen, the fastest configurations and every point's best estimate, written
to the summary and to `points.csv`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from engine.backends import backend_class, extended_backend

from ..fidelity import RISKS, SAMPLE, TOP, at_risk
from .axes import Axis, describe
from .text import ms, table

TOP_LISTED = 10  # configurations listed in the section's tables


@dataclass
class TwoFidelity:
    """A two-fidelity dataset point by point: `points` holds one row per point_id, the screening
    run's columns plus `screen_s` and `fine_s` (iteration times on the screening and the refining
    backend; `fine_s` null for a point not refined), `refined`, `reasons` (why it was refined),
    `at_risk` (the screen's at-risk reasons) and `error` (fine / screen - 1). `screen_backends`: the
    screen's backend, then the one it extends where the points it refused ran (hybrid, phase)."""

    screen_backend: str
    fine_backend: str
    points: pd.DataFrame
    screen_backends: tuple[str, ...] = ()

    @property
    def fallback_points(self) -> int:
        """Points screened on the backend the screen's extends (the screen's refusals)."""
        return int((self.points["engine.backend"] != self.screen_backend).sum())

    def chosen_for(self, reason: str) -> pd.Series:
        """Per point, whether it was refined for `reason` (`sweep.fidelity.SAMPLE`, `TOP`, a risk)."""
        return self.points["reasons"].fillna("").str.split(",").map(lambda reasons: reason in reasons).astype(bool)

    @property
    def in_sample(self) -> pd.Series:
        """Per point, whether it is in the calibration sample (refined points chosen at random)."""
        return self.chosen_for(SAMPLE)

    @property
    def in_top(self) -> pd.Series:
        """Per point, whether it was refined as one of the screen's best."""
        return self.chosen_for(TOP)

    @property
    def sample_errors(self) -> pd.Series:
        """The screen's error over the calibration sample."""
        return self.points.loc[self.in_sample & self.points["error"].notna(), "error"]

    @property
    def band(self) -> tuple[float, float] | None:
        """The calibrated error band: the range of the sample's errors (None without a sample)."""
        errors = self.sample_errors
        return (float(errors.min()), float(errors.max())) if len(errors) else None


def two_fidelity(runs: pd.DataFrame) -> TwoFidelity | None:
    """The points of a two-fidelity dataset, or None if `runs` holds no refined run (a row with
    `refine_reason`) with a screening run of its point on another backend."""
    if "refine_reason" not in runs or runs["refine_reason"].isna().all():
        return None
    chosen = runs[runs["refine_reason"].notna()]
    fine_backend = chosen["engine.backend"].mode().iloc[0]
    paired = runs[(runs["engine.backend"] != fine_backend) & runs["point_id"].isin(chosen["point_id"])]
    if paired.empty:
        return None
    screen_backend = paired["engine.backend"].mode().iloc[0]
    # a hybrid screen runs the points hybrid refuses on phase: the screen is the backend that extends another
    others = set(runs.loc[runs["engine.backend"] != fine_backend, "engine.backend"])
    screen_backend = next((b for b in sorted(others) if extended_backend(b) in others), screen_backend)
    backends = tuple(b for b in (screen_backend, extended_backend(screen_backend)) if b is not None and b in others)
    screen = runs[runs["engine.backend"].isin(backends)].drop_duplicates("point_id", keep="last")
    fine = runs[(runs["engine.backend"] == fine_backend) & runs["status"].eq("ok")].drop_duplicates(
        "point_id", keep="last").set_index("point_id")
    points = screen.set_index("point_id", drop=False).copy()
    points["screen_s"] = points["iteration_time_s"].astype(float)
    points["fine_s"] = fine["iteration_time_s"].astype(float).reindex(points.index)
    points["refined"] = points["fine_s"].notna()
    points["reasons"] = fine["refine_reason"].reindex(points.index)
    points["at_risk"] = at_risk(points.reset_index(drop=True)).to_numpy()
    points["error"] = points["fine_s"] / points["screen_s"] - 1
    return TwoFidelity(screen_backend, fine_backend, points.reset_index(drop=True), backends)


def _estimate(points: pd.DataFrame, band: tuple[float, float] | None, fine_backend: str) -> pd.DataFrame:
    """Each point's best estimate of its iteration time (`estimate_s`: the refined time, else the
    screen's) and how much it can be trusted, in words (`fidelity`)."""
    estimate = points["fine_s"].fillna(points["screen_s"])

    def label(row: pd.Series) -> str:
        if row["refined"]:
            return fine_backend
        if band is None:
            return "screen only (no calibration sample)"
        low, high = row["screen_s"] * (1 + band[0]), row["screen_s"] * (1 + band[1])
        return f"screen only: {fine_backend} expected {ms(low)}-{ms(high)} ms" + (
            " (at risk: may fall outside)" if row["at_risk"] else "")
    return points.assign(estimate_s=estimate, fidelity=points.apply(label, axis=1))


def section(two: TwoFidelity, axes: Sequence[Axis], points_csv: Path) -> list[str]:
    """The summary's two-fidelity section; writes every point with its best estimate to `points_csv`."""
    points, screen, fine = two.points, two.screen_backend, two.fine_backend
    refined = points[points["refined"]]
    reasons = [reason for text in refined["reasons"].dropna() for reason in text.split(",")]
    risk_counts = pd.Series([r for text in points["at_risk"] for r in text.split(",") if r]).value_counts()
    lines = ["", f"## Two fidelities: `{screen}` screen, `{fine}` refinement", "",
             f"**{len(points)} points** screened on `{screen}`"
             + (f" ({two.fallback_points} of them on `{two.screen_backends[1]}`, the backend `{screen}` extends, "
                f"as `{screen}` refuses them)" if two.fallback_points else "")
             + f"; **{len(refined)} refined** on `{fine}` "
             f"({len(refined) / len(points):.1%} of the points): calibration sample {reasons.count(SAMPLE)}, "
             f"top {reasons.count(TOP)}, "
             f"at risk {sum(1 for text in refined['reasons'].dropna() if set(text.split(',')) & set(RISKS))}"
             " (a point can be chosen for several reasons). Both runs of a point share its `point_id`.",
             "", f"The screen marks {int((points['at_risk'] != '').sum())} points at risk"
             + (": " + "; ".join(f"{RISKS[name]}: {number}" for name, number in risk_counts.items()) if len(risk_counts)
                else ("" if "max_link_utilisation" in backend_class(screen).FILLS
                      else f" (`{screen}` reports no contention signals: only failed "
                      "screens count)")) + "."]
    band = two.band
    errors = two.sample_errors
    if band is None:
        lines += ["", "No calibration sample (`hydra.launcher.refine_sample=0`): the screen's error on the points "
                  "not refined is unknown."]
    else:
        lines += ["", f"Calibration: over the random sample of {len(errors)} points, the screen's error "
                  f"({fine} / {screen} - 1) has median {errors.median():+.2%} and ranges from {band[0]:+.2%} to "
                  f"{band[1]:+.2%}. A point not refined is given that band: its `{fine}` time is expected within "
                  f"[screen x (1 {band[0]:+.2%}), screen x (1 {band[1]:+.2%})], as measured on {len(errors)} points, "
                  "not guaranteed (at-risk points are where it is least likely to hold)."]
    others = refined["error"].dropna()
    if len(others):
        worst = refined.loc[others.abs().idxmax()]
        lines += ["", f"Over all {len(others)} refined points (top and at-risk ones included, so not a random sample): "
                  f"median error {others.median():+.2%}, worst {worst['error']:+.2%} (`{worst['point_id']}`: "
                  f"{ms(worst['fine_s'])} ms against {ms(worst['screen_s'])} ms"
                  + (f"; at risk: {worst['at_risk']}" if worst["at_risk"] else "") + ")."]
    top = refined.sort_values(["fine_s", "point_id"], kind="stable").head(TOP_LISTED)
    lines += ["", f"### The {len(top)} fastest configurations at `{fine}` level", "",
              *table(["#", f"{fine} (ms)", f"{screen} (ms)", "screen error", "refined as", "configuration", "point_id"],
                     [[i + 1, ms(row["fine_s"]), ms(row["screen_s"]), f"{row['error']:+.2%}", row["reasons"] or "",
                       describe(row, axes), f"`{row['point_id']}`"] for i, (_, row) in enumerate(top.iterrows())])]
    estimated = _estimate(points, band, fine).sort_values(["estimate_s", "point_id"], kind="stable")
    columns = ["point_id", *(a.key for a in axes), "screen_s", "fine_s", "refined", "reasons", "at_risk", "fidelity"]
    estimated[[c for c in dict.fromkeys(columns) if c in estimated]].to_csv(points_csv, index=False)
    lines += ["", f"### Every point by its best estimate ({len(estimated)}; "
              f"the first {min(len(estimated), 2 * TOP_LISTED)} here, all in `{points_csv.name}`)", "",
              "The estimate is the refined time where there is one, else the screen's, labelled with the band the "
              "calibration gives it:", "",
              *table(["#", "estimate (ms)", "fidelity", "at risk", "configuration", "point_id"],
                     [[i + 1, ms(row["estimate_s"]), row["fidelity"], row["at_risk"] or "", describe(row, axes),
                       f"`{row['point_id']}`"]
                      for i, (_, row) in enumerate(estimated.head(2 * TOP_LISTED).iterrows())])]
    return lines
