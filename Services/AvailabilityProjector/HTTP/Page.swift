/// The time-bar page served at `/`: plain HTML, CSS and JavaScript, no
/// external resources. It reads its state from the URL (`?date=&name=&equipment=`),
/// draws one bar per room for 07:00–19:00 from `GET /api/day`, and polls
/// `GET /api/revision` every 2 seconds to redraw when availability changes.
/// Every segment carries `data-room`, `data-from`, `data-to`, `data-state`
/// (the headless-browser test reads them); `#rooms[data-loaded]` is set once drawn.
public enum ProjectorPage {
    public static let html = #"""
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Room availability</title>
<style>
  :root { --free: #3fa34d; --booked: #c8423b; --pending: #e8a33d; --inprogress: #7b3fa0; --closed: #d5d8dc; --closure: #aab1b9; --ink: #1f2933; --muted: #66727f; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 15px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink); background: #f6f7f9; }
  header { position: sticky; top: 0; z-index: 2; background: #fff; border-bottom: 1px solid #e3e6ea; padding: 10px 14px; }
  h1 { font-size: 18px; margin: 0 0 8px; }
  .controls { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; }
  .controls input, .controls button { font: inherit; padding: 6px 10px; border: 1px solid #c9ced4; border-radius: 6px; background: #fff; }
  .controls button { cursor: pointer; }
  .controls input[type=text] { flex: 1 1 140px; min-width: 0; }
  .legend { display: flex; gap: 12px; font-size: 13px; color: var(--muted); margin-top: 8px; flex-wrap: wrap; }
  .legend i { display: inline-block; width: 12px; height: 12px; border-radius: 3px; vertical-align: -2px; margin-right: 4px; }
  main { padding: 10px 14px 30px; }
  .row { display: grid; grid-template-columns: 190px 1fr; gap: 10px; align-items: center; background: #fff;
         border: 1px solid #e3e6ea; border-radius: 8px; padding: 8px 10px; margin-bottom: 8px; }
  .name { font-weight: 600; }
  .meta { font-size: 12px; color: var(--muted); }
  .bar { display: flex; height: 26px; border-radius: 5px; overflow: hidden; background: var(--closed); }
  .seg { height: 100%; border-right: 1px solid rgba(255,255,255,.6); }
  .seg:last-child { border-right: 0; }
  .seg.free { background: var(--free); } .seg.booked { background: var(--booked); }
  .seg.pending { background: repeating-linear-gradient(45deg, var(--pending), var(--pending) 6px, #f3c77e 6px, #f3c77e 12px); }
  .seg.inProgress { background: var(--inprogress); }
  .seg.closed { background: var(--closed); }
  .seg.closure { background: var(--closure); overflow: hidden; }
  .seg .reason { display: block; font-size: 11px; line-height: 26px; padding: 0 4px; color: var(--ink); white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
  .seg.buffer { background: repeating-linear-gradient(45deg, var(--closed), var(--closed) 3px, #eef0f2 3px, #eef0f2 6px); }
  .ticks { display: flex; justify-content: space-between; font-size: 11px; color: var(--muted); margin-top: 2px; }
  .empty { color: var(--muted); padding: 20px 0; }
  #status { font-size: 12px; color: var(--muted); }
  @media (max-width: 640px) {
    .row { grid-template-columns: 1fr; }
    .ticks span:nth-child(even) { visibility: hidden; }
  }
</style>
</head>
<body>
<header>
  <h1>Room availability <span id="status"></span></h1>
  <div class="controls">
    <button id="prev" aria-label="previous day">&#8592;</button>
    <input id="date" type="date" aria-label="date">
    <button id="next" aria-label="next day">&#8594;</button>
    <button id="today">Today</button>
    <input id="name" type="text" placeholder="Room name" aria-label="room name filter">
    <input id="equipment" type="text" placeholder="Equipment, e.g. beamer,tv" aria-label="equipment filter">
  </div>
  <div class="legend"><span><i style="background:var(--free)"></i>free</span><span><i style="background:var(--booked)"></i>booked</span>
    <span><i style="background:var(--pending)"></i>pending</span><span><i style="background:var(--inprogress)"></i>in use</span><span><i style="background:var(--closed)"></i>closed</span><span><i class="seg buffer"></i>between bookings</span><span><i style="background:var(--closure)"></i>closure</span></div>
</header>
<main id="rooms" aria-live="polite"></main>
<script>
(function () {
  "use strict";
  var WINDOW_FROM = 7 * 60, WINDOW_TO = 19 * 60;
  var params = new URLSearchParams(location.search);
  var state = { date: params.get("date") || "", name: params.get("name") || "", equipment: params.get("equipment") || "", revision: -1 };
  var $ = function (id) { return document.getElementById(id); };
  function minutes(t) { var p = t.split(":"); return parseInt(p[0], 10) * 60 + parseInt(p[1], 10); }
  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function iso(d) { return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()); }
  function shift(days) {
    var base = state.date ? new Date(state.date + "T12:00:00") : new Date();
    base.setDate(base.getDate() + days);
    state.date = iso(base);
    reload();
  }
  function query() {
    var q = new URLSearchParams();
    q.set("date", state.date || "today");
    if (state.name) q.set("name", state.name);
    if (state.equipment) q.set("equipment", state.equipment);
    return q.toString();
  }
  function el(tag, cls, text) { var e = document.createElement(tag); if (cls) e.className = cls; if (text != null) e.textContent = text; return e; }
  function draw(day) {
    var main = $("rooms");
    main.textContent = "";
    if (!state.date) { state.date = day.date; }
    $("date").value = state.date;
    if (!day.rooms.length) { main.appendChild(el("div", "empty", "No rooms match.")); }
    day.rooms.forEach(function (room) {
      var row = el("section", "row");
      row.setAttribute("data-room", room.name);
      var info = el("div");
      info.appendChild(el("div", "name", room.name));
      info.appendChild(el("div", "meta", [room.location, room.capacity + " people", room.equipment.join(", ")].filter(Boolean).join(" · ")));
      info.appendChild(el("div", "meta", room.avail.length ? "free " + room.avail.join(", ") : (room.closed || "fully booked")));
      if (room.closed) row.setAttribute("data-closed", room.closed);
      var right = el("div");
      var bar = el("div", "bar");
      bar.setAttribute("role", "img");
      bar.setAttribute("aria-label", room.name + ": free " + (room.avail.join(", ") || "never"));
      room.segments.forEach(function (s) {
        var seg = el("div", "seg " + s.state);
        var width = (minutes(s.to) - minutes(s.from)) / (WINDOW_TO - WINDOW_FROM) * 100;
        seg.style.width = width + "%";
        seg.title = s.from + "–" + s.to + " " + (s.reason || (s.state === "closed" && room.closed ? room.closed : s.state));
        seg.setAttribute("data-room", room.name);
        seg.setAttribute("data-from", s.from);
        seg.setAttribute("data-to", s.to);
        seg.setAttribute("data-state", s.state);
        if (s.reason) {
          // A closure: greyed, with its reason written on the bar.
          seg.className += " closure";
          seg.setAttribute("data-reason", s.reason);
          seg.appendChild(el("span", "reason", s.reason));
        }
        bar.appendChild(seg);
      });
      right.appendChild(bar);
      var ticks = el("div", "ticks");
      for (var h = 7; h <= 19; h++) ticks.appendChild(el("span", null, pad(h)));
      right.appendChild(ticks);
      row.appendChild(info);
      row.appendChild(right);
      main.appendChild(row);
    });
    main.setAttribute("data-loaded", "true");
    main.setAttribute("data-date", day.date);
    $("status").textContent = "· " + day.date;
  }
  function reload() {
    var q = query();
    history.replaceState(null, "", "?" + q);
    fetch("api/day?" + q, { cache: "no-store" }).then(function (r) { return r.json(); }).then(function (day) {
      if (day.ok === false) { $("rooms").textContent = day.error.text; return; }
      state.revision = day.revision;
      draw(day);
    }).catch(function (e) { $("status").textContent = "· offline (" + e + ")"; });
  }
  function poll() {
    fetch("api/revision", { cache: "no-store" }).then(function (r) { return r.json(); }).then(function (r) {
      if (r.revision !== state.revision) reload();
    }).catch(function () {}).then(function () { setTimeout(poll, 2000); });
  }
  $("prev").onclick = function () { shift(-1); };
  $("next").onclick = function () { shift(1); };
  $("today").onclick = function () { state.date = ""; reload(); };
  $("date").onchange = function () { state.date = $("date").value; reload(); };
  var timer;
  function debounced(key) { return function () { state[key] = $(key).value.trim(); clearTimeout(timer); timer = setTimeout(reload, 250); }; }
  $("name").value = state.name; $("equipment").value = state.equipment;
  $("name").oninput = debounced("name");
  $("equipment").oninput = debounced("equipment");
  reload();
  setTimeout(poll, 2000);
})();
</script>
</body>
</html>
"""#
}
