"""Every number the detector decides by, each with its reason (measured, DESIGN.md, or our assumption)."""


WINDOW = 64  # values in the rolling baseline; llm.c's loss and grad-norm outlier detector uses 64 too
MIN_POINTS = 32  # values before detection starts: order statistics need some mass (our assumption)
REFRESH = 32  # healthy values between two recomputations of the threshold: it lags a little, the
# median lags half a window anyway (and follows a fast fall, see FALLING_Z), and each recomputation costs
# ~5 us: every 16 rows it was a third of the time per row (measured); every 32 the synthetic scores are the same
FALL_REFRESH = 8  # ...and every 8 in a fast fall (FALLING_Z): held for 32 rows, the threshold of a loss that falls
# 20% in 32 rows hid a lasting 1.3x offset (issue 23's plants); the line is fitted 4x as often only there (ours)
IQR_PER_SIGMA = 1.349  # interquartile range of a normal distribution, in standard deviations
SPIKE_Z = 6.0  # robust z-score that opens a spike; our assumption, tuned on the synthetic curves and
# the modded-nanogpt log, whose heavy lower tail alone reaches z = -5 about 34 times in 20k steps
HEAVY_SPREAD = 0.5  # the logs of a positive loss spread (robust sigma) by more than 0.5, its middle half over a
# factor of 2: the batch-to-batch luck of a converged fine-tune or a loss near zero, log-normal, where 3x rows are
# the ordinary tail. The threshold widens from there to a log-normal's 6-sigma point at twice that spread
# (series.tail_distance). Below, nothing changes: pretraining's few percent, and a detection or segmentation batch
# loss's ~0.2 whose one-row 3-4x jumps stay fast_recovery spikes (ours; issue 23's T5 and OCR logs spread by
# 0.7-1.8 and 0.45-1.05, Fast-SCNN's by 0.16-0.27)
SPIKE_REL = 0.05  # ...and at least 5% above the baseline: smaller bumps are noise for this purpose (ours)
SETTLED_REFRESHES = 3  # block refreshes before the baseline is a median: the first ones may fit a line through the
# start of a run (a short log, a fast fall before the falling test has three blocks), and no level shift is
# measured from those (spike_lab's easy start: a 1.8 line held over a fall to 0.9; ours)
SHIFT_ROWS = 7  # a level shift under the spike threshold: the median of 7 values in a row above the baseline by
# BAND_Z sigma (and SPIKE_REL) opens a spike where the first of them left that band. In normal noise 4 of 7 values
# past 3 sigma happen ~1e-10 of the time; a lasting 1.3x offset at 3.4 sigma a row (issue 23's plant in a GPT-2
# log) gets there within a few rows (ours)
BAND_Z = 3.0  # the pre-spike noise band: baseline + 3 robust sigma (our assumption)
BAND_REL = 0.01  # ...and never narrower than 1% of the baseline (our assumption)
CONFIRM = 5  # the first value back in the band and the median of it and the next 4 must be in the band
FAST_STEPS = 20  # DESIGN.md: back in the band within 20 steps of the peak is a fast recovery
DIVERGE_RATIO = 1.5  # DESIGN.md: settling at 1.5x the pre-spike level or more is a divergence
EARLY_TREND = 0.5  # before the window is full, a falling line (through it or its newer half) whose residuals spread less than half the values do is the baseline (ours)
EARLY_RECENT = 8  # ...and never under the median of its latest 8 values (ours)
BLOCK = 32  # values per block median: settling, creeping and resume checks compare block medians
MIN_SETTLE_BLOCKS = 4  # follow a spike for at least 4 blocks before calling its level settled (ours)
SETTLE_TOL = 1.0  # block medians closer than 1 noise sigma are level (a median of 32 moves ~0.2 sigma)
SETTLE_FACTOR = 4.0  # still coming down, but the band is more than 4x the time since the peak away at
# the current rate of descent: call it settled (our assumption, tuned on the synthetic curves)
MAX_FOLLOW = 4096  # values after which an unresolved spike is judged by its level
FALLING_Z = 3.0  # the latest block median this many sigma (the block's own spread) under the one two blocks
# earlier: the loss falls fast, and the baseline is a line through the window, not its median (ours)
TREND_BLOCKS = 8  # block medians that give the pre-spike trend
VERIFY = 4 * BLOCK  # values after a recovery whose level is checked against the pre-spike trend
OFFSET_Z = 1.5  # a median of those this many noise sigma above the trend (the median of 64 values moves
OFFSET_REL = 0.02  # ~0.2 sigma) and 2% or more, not still coming down: a lasting offset, no_recovery (ours)
FALL_PACE = 0.5  # after a spike in a fast fall, the later values still falling by half the factor per row the loss fell
# by before, or more: the fall goes on, and the level after is judged against it, not the pre-spike level (ours)
BLOCK_SHIFT_Z = 6.0  # a block median this many of its standard errors (MEDIAN_SE: 1.33 noise sigma) off the trend is
# off it: in normal noise ~1e-9 of blocks by chance; a bump decaying over 100 rows from 3 sigma stays past it for 60
# rows after its rows are back in the band (issue 23's plants; ours)
FALL_Z = 0.5  # still coming down: the later median lower by 0.5 sigma (2 standard errors of the difference)
SPIKE_ABS = 0.002  # floors in units of the run's own scale, its highest baseline so far (the first loss,
CREEP_ABS = 0.01  # usually): a loss near zero moving by a hair is no spike or creep (ours)
CREEP_REL = 0.10  # a block median 10% above the lowest one so far, twice in a row, with no spike
CREEP_BLOCKS = 2  # ...is a divergence without a spike (our assumption)
CREEP_SMOOTH = 4  # block medians whose median is the level the creep watch compares (a median of ~128 values: the
# lowest of those is no extreme of a single block's noise; ours)
MEDIAN_SE = 1.2533 / BLOCK ** 0.5  # the standard error of a block median, in sigmas (sqrt(pi/2) / sqrt(n))
BLOCK_SIGMAS = BLOCK_SHIFT_Z * MEDIAN_SE  # 1.33 noise sigma: a block median this far off is off (BLOCK_SHIFT_Z)
WINDOW_SIGMAS = BLOCK_SHIFT_Z * MEDIAN_SE * (BLOCK / WINDOW) ** 0.5  # 0.94 sigma: ...and so is the median of a
# window, two blocks (a lasting 1.3x offset at 1.0-1.5 sigma a row stays under a block's line: issue 23's Fast-SCNN
# plants)
CREEP_Z = 3.0  # ...and more than 3 of those above the lowest, in logs: a heavy-tailed batch loss near zero (its logs
# spread by ~1.5) has block medians 1.5x apart by chance, no creep (issue 23's OCR log; ours)
DROP_Z = 2.0  # after a resume, the first block median this many sigma below the last one before it
DROP_REL = 0.01  # ...and at least 1% lower is a suspicious drop (our assumption)
JUMP_CONFIRM = 16  # values whose median must stay above the midpoint to call the jump back up
RESUME_NEAR = 64  # rows: a spike starting this soon after a resume is a resume spike (one window)
LEAD_STEPS = 10  # a grad-norm spike at most this many steps (or one logged row) before a loss spike led it;
# further back, on real logs, unrelated blips were picked up (ours)
GRAD_ALONE_RATIO = 2.0  # a grad-norm spike with no loss spike is an event from twice its baseline up: the grad
# norm is heavy-tailed, and smaller blips alone mean nothing (ours; the llm.c log's lone spike was 6.7x)
SHARED_GAP = 3  # rows: spikes in two dataset series this close together are one event
