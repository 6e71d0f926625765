// gradpress live dashboard: drawing only what a refresh added. Inlined into
// server/dashboard/index.html at its <!-- GP:APPENDJS --> line (by the server, scripts/dashboard.sh
// and the tests), before the page's own script, which calls:
//   drawIncrementally(chart)     once, on a Chart.js 3 line chart;
//   refreshLines(chart, markers) when its datasets' data changed (markers: how many the page draws);
//   grow(scaleOptions, dataMax, live) before that, for an axis that grows with the run, and
//   settleAccuracy(scaleOptions, dataMin, live) for a test accuracy axis;
//   drawIncrementally(chart, barsState) once, on a stacked bar chart (the phases), then
//   refreshBars(chart) when its values changed, after growBars(scaleOptions, dataMax, live).
// The page sets chart.gpLabels (rectangles it draws over the plot, which new segments must not
// cross). Test hooks: chart.gpAppends (refreshes appended), chart.gpBarRedraws (refreshes
// that drew only the bars), chart.gpStale.
'use strict';

// A refresh mostly appends a second's steps to lines whose axes stay put. Then the chart keeps
// its pixels and only the new segments are stroked, placed by the chart's own scales: laying
// out and redrawing every chart every second (all points, grid, ticks, the browser compositing
// each canvas again) is what an open page costs the machine it runs on. Anything else (an
// axis that must change, a point outside the axes, a dataset, a marker, a rewritten or thinned
// point, an active tooltip) updates the chart as Chart.js always would; so does anything that
// makes Chart.js draw by itself (hover, resize, a legend click), after laying out the points
// it has not seen (chart.gpStale).
function drawnState(chart) {
  return {markers: chart.gpMarkers, points: chart.options.elements.point.radius,
          sets: chart.data.datasets.map((d, i) => ({label: d.label, data: d.data, n: d.data.length,
                                                     shown: chart.isDatasetVisible(i)}))};
}

// A dataset whose data is the array drawn last has only grown: the page extends its arrays in
// place only by appending, and builds a new array for anything else, which is compared here.
function samePrefix(old, now) {
  if (now.data === old.data) return now.n >= old.n;
  old = old.data; now = now.data;
  if (now.length < old.length) return false;
  for (let i = 0; i < old.length; i++) if (old[i].x !== now[i].x || old[i].y !== now[i].y) return false;
  return true;
}

// Strokes what the datasets gained since the chart was last drawn; false (nothing drawn) when
// that is not all that changed.
function drawAppended(chart) {
  const last = chart.gpLast, now = drawnState(chart);
  if (!last || now.markers !== last.markers || now.sets.length !== last.sets.length) return false;
  const dot = chart.options.elements.point;
  if (now.points > 0 && (dot.pointStyle !== 'circle' || dot.rotation)) return false;
  if (chart.tooltip && chart.tooltip.getActiveElements().length) return false;
  const {ctx, chartArea: a, scales: {x}} = chart, work = [];
  const at = (p, y) => ({x: x.getPixelForValue(p.x), y: y.getPixelForValue(p.y)});
  for (let i = 0; i < now.sets.length; i++) {
    const was = last.sets[i], is = now.sets[i], d = chart.data.datasets[i], y = chart.scales[d.yAxisID || 'y'];
    if (was.label !== is.label || was.shown !== is.shown || !samePrefix(was, is)) return false;
    if (!is.shown || is.n === was.n) continue;
    const fresh = is.data.slice(was.n);
    if (!fresh.every((p) => p.x >= x.min && p.x <= x.max && p.y >= y.min && p.y <= y.max)) return false;
    if ((d.borderDash || []).length) return false;   // the dash pattern runs from the first point
    // From the point before the pixel column the last drawn point fell in: Chart.js draws a
    // column's points as one vertical stroke, which the new points may lengthen.
    let from = Math.max(0, was.n - 1);
    const col = (i) => at(is.data[i], y).x | 0, lastCol = col(from);
    while (from > 0 && col(from - 1) === lastCol) from--;
    // Points drawn as dots: Chart.js draws a dataset's dots over its line, so the last drawn
    // dot, which the new segment crosses, is drawn again with the new ones.
    const dots = now.points > 0 ? is.data.slice(Math.max(0, was.n - 1)).map((p) => at(p, y)) : [];
    work.push({d, pts: is.data.slice(Math.max(0, from - 1)).map((p) => at(p, y)), dots,
               clip: chart.getDatasetMeta(i)._clip});
  }
  // A new segment under a marker's label would paint over the label.
  const under = (p) => (chart.gpLabels || []).some((r) => p.x >= r.x0 && p.x <= r.x1 && p.y >= r.y0 && p.y <= r.y1);
  if (work.some(({pts}) => pts.some(under))) return false;
  const line = chart.options.elements.line;
  for (const {d, pts, dots, clip} of work.reverse()) {   // Chart.js draws the first dataset last, on top
    // Clipped as Chart.js clips a dataset: its area widened by what its line and dots overflow.
    const c = !clip ? {left: 0, top: 0, right: 0, bottom: 0}
      : clip.disabled ? {left: false, top: false, right: false, bottom: false} : clip;
    const x0 = c.left === false ? 0 : a.left - c.left, x1 = c.right === false ? chart.width : a.right + c.right;
    const y0 = c.top === false ? 0 : a.top - c.top, y1 = c.bottom === false ? chart.height : a.bottom + c.bottom;
    ctx.save();
    ctx.beginPath(); ctx.rect(x0, y0, x1 - x0, y1 - y0); ctx.clip();
    ctx.strokeStyle = d.borderColor; ctx.lineWidth = d.borderWidth || line.borderWidth;
    ctx.setLineDash(d.borderDash || []); ctx.lineCap = 'butt'; ctx.lineJoin = 'miter';
    ctx.beginPath(); ctx.moveTo(pts[0].x, pts[0].y);
    columnPath(ctx, pts.slice(1));
    ctx.stroke();
    // Chart.js 3's drawPoint for a circle: filled, then outlined.
    ctx.fillStyle = d.backgroundColor; ctx.lineWidth = dot.borderWidth;
    for (const p of dots) {
      ctx.beginPath(); ctx.arc(p.x, p.y, now.points, 0, 2 * Math.PI); ctx.closePath();
      ctx.fill();
      if (dot.borderWidth) ctx.stroke();
    }
    ctx.restore();
  }
  chart.gpLast = now;
  chart.gpStale = true;
  chart.gpAppends = (chart.gpAppends || 0) + 1;
  return true;
}

// The path Chart.js 3 draws for a straight line (its fastPathSegment): points sharing a pixel
// column become one vertical stroke, min to max, ending at the column's last point.
function columnPath(ctx, pts) {
  let col, minY, maxY, lastY, avgX = 0, n = 0;
  const flush = () => {
    if (minY !== maxY) { ctx.lineTo(avgX, maxY); ctx.lineTo(avgX, minY); ctx.lineTo(avgX, lastY); }
  };
  for (const {x, y} of pts) {
    if ((x | 0) === col) {
      if (y < minY) minY = y; else if (y > maxY) maxY = y;   // as Chart.js does
      avgX = (n * avgX + x) / ++n;
    } else {
      flush();
      ctx.lineTo(x, y);
      col = x | 0; n = 0; minY = maxY = y;
    }
    lastY = y;
  }
  flush();
}

// Refreshes a line chart whose data changed: appended when drawAppended can, else laid out and
// drawn whole. markers: how many markers the page draws over the charts (a new one: drawn whole).
function refreshLines(chart, markers) {
  chart.gpMarkers = markers;
  if (!drawAppended(chart)) { chart.gpStale = false; chart.update('none'); }
}

// Wraps chart.draw: a draw Chart.js starts by itself while appended points are not laid out
// yet (chart.gpStale) lays them out first, which draws the chart whole. state: what a later
// refresh compares with what was drawn (drawnState for lines, barsState for bars).
function drawIncrementally(chart, state = drawnState) {
  const whole = chart.draw.bind(chart);
  chart.draw = function () {
    if (chart.gpStale) { chart.gpStale = false; chart.update('none'); return; }
    whole();
    chart.gpLast = state(chart);
  };
}

// The phases chart's values change every refresh (means of the last steps), its layout does
// not: the same workers, datasets and value axis (growBars keeps it put). Then its bars are
// placed from its own value scale as Chart.js places stacked bars, and the chart draws itself
// clipped to the whole pixels of its plot area: every pixel there is what a whole draw paints
// (grid, axis lines, bars, in Chart.js's order) and none outside is touched. What it saves
// is Chart.js laying out the chart (options, scales, ticks, legend) every second.
function barsState(chart) {
  const y = chart.scales.y;
  return {labels: (chart.data.labels || []).join('\n'), min: y.min, max: y.max,
          suggested: chart.options.scales.y.suggestedMax,
          shown: chart.data.datasets.map((d, i) => chart.isDatasetVisible(i)).join()};
}
function redrawBars(chart) {
  const last = chart.gpLast, now = barsState(chart), y = chart.scales.y, n = (chart.data.labels || []).length;
  if (!last || !n || last.min !== 0 || now.labels !== last.labels || now.shown !== last.shown ||
      now.suggested !== last.suggested) return false;
  if (chart.tooltip && chart.tooltip.getActiveElements().length) return false;
  // Chart.js 3's bar controller (_calculateBarValuePixels): a bar from the stack below it to
  // its top; one standing on the axis starts half the axis line above it. A value that does
  // not fit leaves the rest to a whole update, which places every bar again.
  const zero = y.getPixelForValue(0), half = y.getLineWidthForValue(0) / 2, sums = new Array(n).fill(0);
  for (let k = 0; k < chart.data.datasets.length; k++) {
    if (!chart.isDatasetVisible(k)) continue;
    const data = chart.data.datasets[k].data, els = chart.getDatasetMeta(k).data;
    if (els.length !== n || data.length !== n) return false;
    for (let i = 0; i < n; i++) {
      const v = data[i];
      if (!(v >= 0) || !(sums[i] + v <= last.max)) return false;   // within the axis, stacked up
      let base = y.getPixelForValue(sums[i]);
      const head = y.getPixelForValue(sums[i] + v);
      let size = head - base;
      if (base === zero) { const g = Math.sign(size) * half; base += g; size -= g; }
      Object.assign(els[i], {base, y: head, height: Math.abs(size)});
      sums[i] += v;
    }
  }
  const a = chart.chartArea, r = chart.currentDevicePixelRatio || 1, ctx = chart.ctx;
  const x0 = Math.ceil(a.left * r) / r, y0 = Math.ceil(a.top * r) / r;
  const x1 = Math.floor(a.right * r) / r, y1 = Math.floor(a.bottom * r) / r;
  ctx.save();
  ctx.beginPath(); ctx.rect(x0, y0, x1 - x0, y1 - y0); ctx.clip();
  chart.gpStale = false;
  chart.draw();   // clears only what the clip lets through, then draws as a whole draw does
  ctx.restore();
  chart.gpStale = true;   // the parsed values (tooltips) are the last update's
  chart.gpBarRedraws = (chart.gpBarRedraws || 0) + 1;
  return true;
}
function refreshBars(chart) {
  if (!redrawBars(chart)) { chart.gpStale = false; chart.update('none'); }
}

// The value axis of the stacked bars: room for a quarter more than the tallest stack (Chart.js
// rounds it up to a tick), moved only when a stack outgrows it or falls below a third of it.
// Offline: fitted to the data.
function growBars(scale, dataMax, live) {
  const was = scale.suggestedMax;
  if (!live || !(dataMax > 0)) delete scale.suggestedMax;
  else if (!(was >= dataMax) || dataMax < was / 3) scale.suggestedMax = niceCeil(dataMax * 1.25);
  return scale.suggestedMax !== was;
}

// Axes that grow with the run (step, bytes, running total) get room to double while live: a
// chart whose axis moves is drawn whole, and an axis that grows by doubling moves about log2 of
// the run's length times (12 in a 10-epoch LeNet run), where one with 20% headroom moved every
// 2 to 3 s of the main job's. Offline the data is complete and fits exactly. True when the axis
// changed.
function niceCeil(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  return [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10].find((m) => m * p >= v) * p;
}
// Test accuracy's axis while live: up to 1, down to a tenth below the lowest value, moved only
// when a value falls below it, so that an epoch's new point is appended rather than the chart
// drawn whole. Offline: fitted to the data. True when the axis changed.
function settleAccuracy(scale, dataMin, live) {
  const was = [scale.min, scale.max].join();
  if (!live || !(Number.isFinite(dataMin) && dataMin >= 0)) { delete scale.min; delete scale.max; }
  else {
    scale.max = 1;
    if (!(scale.min <= dataMin)) scale.min = Math.max(0, Math.floor(dataMin * 10) / 10 - 0.1);
  }
  return [scale.min, scale.max].join() !== was;
}
function grow(scale, dataMax, live) {
  const was = scale.max;
  if (!live || !(dataMax > 0)) delete scale.max;
  else if (!(scale.max >= dataMax)) scale.max = niceCeil(dataMax * 2);
  return scale.max !== was;
}
