/* Recommendation charts: each figure.perf-chart holds a json_script with the calibrated
   curve of advice.perfmodel (concurrency, output tok/s and p99 TPOT for the current and the
   recommended command, and the server's measured point). Tokens/s on the left axis, p99
   TPOT (ms) on the right; the measured point is drawn as a larger dot. */
(function () {
  "use strict";
  if (typeof Chart === "undefined") { return; }
  var css = getComputedStyle(document.documentElement);
  var fg = css.getPropertyValue("--muted").trim() || "#667085";
  var grid = css.getPropertyValue("--line").trim() || "#dde1e6";
  var colours = {current: "#4e79a7", recommended: "#59a14f", measured: "#e15759"};

  function series(xs, ys, factor) {
    return xs.map(function (x, i) { return {x: x, y: ys[i] === null ? null : ys[i] * factor}; });
  }

  document.querySelectorAll("figure.perf-chart").forEach(function (fig) {
    var script = fig.querySelector("script[type='application/json']");
    var canvas = fig.querySelector("canvas");
    if (!script || !canvas) { return; }
    var c = JSON.parse(script.textContent);
    var sets = [];
    ["current", "recommended"].forEach(function (name) {
      if (!c[name]) { return; }
      sets.push({label: name + " tok/s", data: series(c.concurrency, c[name].output_tps, 1),
                 borderColor: colours[name], backgroundColor: colours[name], yAxisID: "y",
                 borderWidth: 1.6, pointRadius: 1.5, spanGaps: false});
      sets.push({label: name + " p99 TPOT ms", data: series(c.concurrency, c[name].tpot_p99_s, 1000),
                 borderColor: colours[name], backgroundColor: colours[name], yAxisID: "y2",
                 borderDash: [5, 3], borderWidth: 1.2, pointRadius: 1, spanGaps: false});
    });
    var m = c.measured || {};
    if (m.output_tps !== null && m.output_tps !== undefined) {
      sets.push({type: "scatter", label: "measured tok/s", yAxisID: "y", pointRadius: 5,
                 data: [{x: m.concurrency, y: m.output_tps}], backgroundColor: colours.measured});
    }
    if (m.tpot_p99_s !== null && m.tpot_p99_s !== undefined) {
      sets.push({type: "scatter", label: "measured p99 TPOT ms", yAxisID: "y2", pointRadius: 5,
                 pointStyle: "rectRot", data: [{x: m.concurrency, y: m.tpot_p99_s * 1000}],
                 backgroundColor: colours.measured});
    }
    new Chart(canvas, {
      type: "line", data: {datasets: sets},
      options: {
        animation: false, responsive: true, maintainAspectRatio: false,
        plugins: {legend: {labels: {color: fg, boxWidth: 10, font: {size: 10}}}},
        scales: {
          x: {type: "logarithmic", title: {display: true, text: "concurrency", color: fg},
              ticks: {color: fg, font: {size: 10}}, grid: {color: grid}},
          y: {beginAtZero: true, position: "left", title: {display: true, text: "tok/s", color: fg},
              ticks: {color: fg, font: {size: 10}}, grid: {color: grid}},
          y2: {beginAtZero: true, position: "right", title: {display: true, text: "p99 TPOT ms", color: fg},
               ticks: {color: fg, font: {size: 10}}, grid: {drawOnChartArea: false}}
        }
      }
    });
  });
})();
