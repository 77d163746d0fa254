// Plotly sizes a figure to its div when it draws it, and again only when told: redraw each figure whenever its div
// changes width (a window resized, the sidebar shown or hidden, a late style), so it always fits the column.
(function () {
  if (typeof ResizeObserver === 'undefined') return;
  const widths = new WeakMap();
  const ro = new ResizeObserver(entries => {
    for (const e of entries) {
      const d = e.target, w = Math.round(e.contentRect.width);
      if (widths.get(d) === w) continue;
      widths.set(d, w);
      if (window.Plotly && d.classList.contains('js-plotly-plot')) window.Plotly.Plots.resize(d);
    }
  });
  const watch = () => document.querySelectorAll('div.plotly-graph-div').forEach(d => ro.observe(d));
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', watch); else watch();
  window.addEventListener('load', () => document.querySelectorAll('div.js-plotly-plot').forEach(d => window.Plotly && window.Plotly.Plots.resize(d)));
})();
