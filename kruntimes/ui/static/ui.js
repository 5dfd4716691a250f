// kruntimes ui: draws the figures a page embeds as JSON, and makes them navigable.
// No inline scripts (the Content Security Policy allows scripts from this server only).
"use strict";

function toIso(value) {
  // Plotly gives "2026-12-01 17:37:30.123" (UTC, as the axis is): make it RFC 3339.
  var text = String(value).replace(" ", "T");
  return /Z|[+-]\d\d:\d\d$/.test(text) ? text : text + "Z";
}

function drawFigures() {
  document.querySelectorAll("[data-figure]").forEach(function (div) {
    var spec = JSON.parse(document.getElementById(div.dataset.figure).textContent);
    var config = {displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"]};
    Plotly.newPlot(div, spec.data, spec.layout, config).then(function () {
      div.dataset.drawn = "true";
    });
    div.on("plotly_click", function (event) {
      var point = event.points && event.points[0];
      var href = point && point.customdata && point.customdata[2];
      if (href && href.charAt(0) === "/") { window.location.assign(href); }
    });
    if (div.id === "lanes") {
      div.on("plotly_relayout", function (change) {
        var start = change["xaxis.range[0]"], end = change["xaxis.range[1]"];
        if (start === undefined || end === undefined) { return; }
        var url = new URL(window.location.href);
        url.searchParams.set("since", toIso(start));
        url.searchParams.set("until", toIso(end));
        window.location.assign(url.pathname + url.search);
      });
    }
  });
}

function wireReplayLinks() {
  document.querySelectorAll("a[data-verdict]").forEach(function (a) {
    a.addEventListener("click", function (event) {
      event.preventDefault();
      var target = document.getElementById(a.dataset.verdict);
      target.textContent = "replaying…";
      var href = a.getAttribute("href");
      fetch(href + (href.indexOf("?") < 0 ? "?" : "&") + "fragment=1").then(function (response) {
        return response.text().then(function (text) { return {ok: response.ok, text: text}; });
      }).then(function (answer) {
        var doc = new DOMParser().parseFromString(answer.text, "text/html");
        var found = doc.querySelector(".verdict") || doc.querySelector(".error");
        target.replaceChildren(found ? document.importNode(found, true) : document.createTextNode("no answer"));
      }).catch(function (error) { target.textContent = "replay failed: " + error; });
    });
  });
}

document.addEventListener("DOMContentLoaded", function () {
  if (window.Plotly) { drawFigures(); }
  wireReplayLinks();
  document.body.dataset.ready = "true";
});
