// Replaces the lane page's server-rendered SVG chart with an interactive
// uPlot chart (zoom, hover legend). Data comes from the runs table beneath
// (data-t, data-backend, data-exact, data-total, data-control on each row),
// so the chart and the table can never disagree. Colours come from the CSS
// custom properties of app.css.
(function () {
  'use strict';
  var fig = document.getElementById('lane-chart');
  var rows = document.querySelectorAll('#lane-runs tbody tr[data-t]');
  if (!fig || !rows.length || typeof window.uPlot !== 'function') { return; }
  var css = getComputedStyle(document.documentElement);
  function colour(name, fallback) { return (css.getPropertyValue('--' + name) || '').trim() || fallback; }

  var runs = Array.prototype.map.call(rows, function (tr) {
    return { t: Number(tr.dataset.t), backend: tr.dataset.backend, exact: Number(tr.dataset.exact),
      total: Number(tr.dataset.total), miss: tr.dataset.control === 'not_caught' };
  }).reverse(); // the table is newest first
  runs.sort(function (a, b) { return a.t - b.t; });

  var xs = [], backends = [];
  runs.forEach(function (r) {
    if (xs.indexOf(r.t) < 0) { xs.push(r.t); }
    if (backends.indexOf(r.backend) < 0) { backends.push(r.backend); }
  });
  // A single instant has no time span to zoom over: keep the server's SVG.
  if (xs.length < 2) { return; }
  function column() { return xs.map(function () { return null; }); }
  var exact = {}, total = column(), miss = column();
  backends.forEach(function (b) { exact[b] = column(); });
  runs.forEach(function (r) {
    var i = xs.indexOf(r.t);
    exact[r.backend][i] = r.exact;
    total[i] = Math.max(total[i] || 0, r.total);
    if (r.miss) { miss[i] = r.exact; }
  });

  var series = [{ label: 'finished' }];
  var data = [xs];
  backends.forEach(function (b) {
    var c = colour(b, '#0a58ca');
    series.push({ label: b + ' exact', stroke: c, width: 2, spanGaps: true, points: { show: true, size: 8, fill: c } });
    data.push(exact[b]);
  });
  series.push({ label: 'cases total', stroke: colour('total', '#8c959f'), width: 1.5, dash: [6, 4], spanGaps: true, points: { show: false } });
  data.push(total);
  series.push({ label: 'control not caught', stroke: colour('miss', '#cf222e'), width: 0, paths: function () { return null; },
    points: { show: true, size: 12, fill: colour('miss', '#cf222e') } });
  data.push(miss);

  var host = document.createElement('div');
  host.className = 'uplot-host';
  host.setAttribute('role', 'img');
  var desc = fig.querySelector('desc');
  host.setAttribute('aria-label', desc ? desc.textContent : 'lane history chart');
  var svg = fig.querySelector('svg.svg-chart');
  var legend = fig.querySelector('ul.legend');
  fig.appendChild(host);
  var maxTotal = Math.max.apply(null, runs.map(function (r) { return r.total; }).concat([1]));
  function width() { return Math.max(280, host.clientWidth || fig.clientWidth || 600); }
  var plot = new window.uPlot({
    width: width(), height: 300,
    series: series,
    scales: { y: { range: [0, Math.ceil(maxTotal * 1.05)] } },
    axes: [{}, { label: 'cases exact' }]
  }, data, host);
  if (svg) { svg.classList.add('hidden'); }
  if (legend) { legend.classList.add('hidden'); }
  // Machine-readable summary of what was plotted, per backend, oldest first.
  fig.dataset.chart = 'uplot';
  fig.dataset.plotted = backends.map(function (b) {
    return b + ': ' + runs.filter(function (r) { return r.backend === b; }).map(function (r) { return r.exact + '/' + r.total; }).join(' -> ');
  }).join('; ');
  window.addEventListener('resize', function () { plot.setSize({ width: width(), height: 300 }); });
})();
