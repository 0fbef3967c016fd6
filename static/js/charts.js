/* Host page charts: reads the json_script #chart-data (server-side downsampled series
   of [epoch_ms, value|null]) and draws one Chart.js line chart per canvas[data-chart].
   Nulls stay nulls so missing data is a gap, never a zero. */
(function () {
  "use strict";
  var source = document.getElementById("chart-data");
  if (!source || typeof Chart === "undefined") { return; }
  var data = JSON.parse(source.textContent);
  var css = getComputedStyle(document.documentElement);
  var fg = css.getPropertyValue("--muted").trim() || "#667085";
  var grid = css.getPropertyValue("--line").trim() || "#dde1e6";
  var palette = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7"];
  var spanMs = data.end - data.start;

  /* Tick spacing on whole clock units: about six ticks per window. */
  var STEPS = [60e3, 120e3, 300e3, 600e3, 900e3, 1800e3, 3600e3, 7200e3, 10800e3, 21600e3, 43200e3, 86400e3];
  var step = STEPS.find(function (s) { return spanMs / s <= 8; }) || 86400e3;

  /* A point with no neighbour would be invisible with radius 0: draw it as a dot. */
  function isolated(ctx) {
    var d = ctx.dataset.data, i = ctx.dataIndex;
    var before = i > 0 && d[i - 1].y !== null, after = i < d.length - 1 && d[i + 1].y !== null;
    return d[i].y !== null && !before && !after ? 2 : 0;
  }

  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function tick(ms) {
    var d = new Date(ms);
    var hm = pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes());
    return spanMs > 2 * 86400000 ? (d.getUTCMonth() + 1) + "/" + d.getUTCDate() + " " + hm : hm;
  }

  function build(spec) {
    var datasets = spec.datasets.map(function (ds, i) {
      return {
        label: ds.label,
        data: ds.data.map(function (p) { return {x: p[0], y: p[1]}; }),
        borderColor: palette[i % palette.length], backgroundColor: palette[i % palette.length],
        borderWidth: 1.4, pointRadius: isolated, pointHitRadius: 6, spanGaps: false, tension: 0
      };
    });
    if (spec.baseline !== null && spec.baseline !== undefined) {
      datasets.push({
        label: spec.baseline_label || "baseline",
        data: [{x: data.start, y: spec.baseline}, {x: data.end, y: spec.baseline}],
        borderColor: fg, borderDash: [4, 3], borderWidth: 1, pointRadius: 0
      });
    }
    return datasets;
  }

  document.querySelectorAll("canvas[data-chart]").forEach(function (canvas) {
    var spec = data.charts.find(function (c) { return c.id === canvas.dataset.chart; });
    if (!spec) { return; }
    new Chart(canvas, {
      type: "line",
      data: {datasets: build(spec)},
      options: {
        animation: false, responsive: true, maintainAspectRatio: false, parsing: true,
        interaction: {mode: "nearest", axis: "x", intersect: false},
        plugins: {
          legend: {display: spec.datasets.length > 1 || spec.baseline != null,
                   labels: {color: fg, boxWidth: 10, font: {size: 11}}},
          tooltip: {callbacks: {title: function (items) { return items.length ? tick(items[0].parsed.x) + " UTC" : ""; }}}
        },
        scales: {
          x: {type: "linear", min: data.start, max: data.end,
              ticks: {color: fg, stepSize: step, autoSkip: true, maxRotation: 0, callback: tick,
                      font: {size: 10}}, grid: {color: grid}},
          y: {beginAtZero: true, ticks: {color: fg, font: {size: 10}}, grid: {color: grid}}
        }
      }
    });
  });
})();
