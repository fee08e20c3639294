/// The time-bar page served at `/`: plain HTML, CSS and JavaScript, no
/// external resources. It reads its state from the URL
/// (`?date=&name=&equipment=`, `&room=` for one room's week), draws one bar
/// per room for 07:00–19:00 from `GET /api/day` (or one bar per day from
/// `GET /api/week`) — free, booked, pending, held (a hold awaiting its
/// requester's confirmation, in its own style), in use, between bookings,
/// closed — and polls `GET /api/revision` every 2 seconds to
/// redraw when availability changes. The "Find a room" form asks
/// `GET /suggest` and, when the projector books for the page
/// (`GET /api/page`), books a suggestion with `POST /api/book` and shows
/// the answer in words. Every segment carries `data-room`, `data-from`,
/// `data-to`, `data-state` (and in the week view `data-date`; the
/// headless-browser tests read them); `#rooms[data-loaded]` is set once drawn.
public enum ProjectorPage {
    public static let html = #"""
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Room availability</title>
<style>
  :root { --free: #3fa34d; --booked: #c8423b; --pending: #e8a33d; --inprogress: #7b3fa0; --held: #2f6fb0; --closed: #d5d8dc; --closure: #aab1b9; --ink: #1f2933; --muted: #66727f; }
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
  /* Held: taken for minutes while its requester confirms; blue stripes, unlike pending's orange. */
  .seg.held { background: repeating-linear-gradient(-45deg, var(--held), var(--held) 6px, #9cc0e6 6px, #9cc0e6 12px); }
  .seg.closed { background: var(--closed); }
  .seg.closure { background: var(--closure); overflow: hidden; }
  .seg .reason { display: block; font-size: 11px; line-height: 26px; padding: 0 4px; color: var(--ink); white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
  .seg.buffer { background: repeating-linear-gradient(45deg, var(--closed), var(--closed) 3px, #eef0f2 3px, #eef0f2 6px); }
  .ticks { display: flex; justify-content: space-between; font-size: 11px; color: var(--muted); margin-top: 2px; }
  .empty { color: var(--muted); padding: 20px 0; }
  #status { font-size: 12px; color: var(--muted); }
  .name button { font: inherit; font-weight: 600; border: 0; background: none; padding: 0; color: #1d4ed8; cursor: pointer; text-align: left; }
  #find { background: #fff; border-bottom: 1px solid #e3e6ea; padding: 8px 14px; }
  #find summary { cursor: pointer; font-weight: 600; }
  #find form { display: flex; flex-wrap: wrap; gap: 8px; align-items: end; margin-top: 8px; }
  #find label { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); }
  #find input, #find select, #find button { font: inherit; padding: 5px 8px; border: 1px solid #c9ced4; border-radius: 6px; background: #fff; }
  #find input[type=number] { width: 6em; }
  #who { display: none; flex-wrap: wrap; gap: 8px; margin-top: 8px; }
  #who.on { display: flex; }
  #suggestions { list-style: none; padding: 0; margin: 8px 0 0; }
  #suggestions li { display: flex; gap: 10px; align-items: center; padding: 4px 0; border-top: 1px solid #eef0f2; flex-wrap: wrap; }
  #suggestions .when { font-variant-numeric: tabular-nums; min-width: 13em; }
  #suggestions button { font: inherit; padding: 3px 10px; border-radius: 6px; border: 1px solid #1d4ed8; background: #1d4ed8; color: #fff; cursor: pointer; }
  #suggestions button.show { background: #fff; color: #1d4ed8; }
  #book-result { margin-top: 6px; font-weight: 600; }
  #book-result[data-ok="true"] { color: #1f7a33; } #book-result[data-ok="false"] { color: #b42318; }
  #week-title { font-weight: 600; margin: 0 0 8px; display: none; }
  #week-title.on { display: block; }
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
    <button id="all-rooms" hidden>All rooms</button>
  </div>
  <div class="legend"><span><i style="background:var(--free)"></i>free</span><span><i style="background:var(--booked)"></i>booked</span>
    <span><i style="background:var(--pending)"></i>pending</span><span><i style="background:var(--inprogress)"></i>in use</span><span data-legend="held"><i class="seg held"></i>held — awaiting confirmation</span><span><i style="background:var(--closed)"></i>closed</span><span><i class="seg buffer"></i>between bookings</span><span><i style="background:var(--closure)"></i>closure</span></div>
</header>
<section id="find">
  <details id="find-details">
    <summary>Find a room</summary>
    <form id="find-form">
      <label>From <input id="find-from" type="date" required></label>
      <label>Days <select id="find-days"><option>1</option><option>2</option><option>3</option><option>4</option><option selected>5</option><option>6</option><option>7</option></select></label>
      <label>Minutes <select id="find-duration"><option>15</option><option>30</option><option>45</option><option selected>60</option><option>90</option><option>120</option><option>180</option><option>240</option></select></label>
      <label>People <input id="find-people" type="number" min="1" value="1"></label>
      <label>Equipment <input id="find-equipment" type="text" placeholder="beamer,tv"></label>
      <label>Starts every <select id="find-step"><option value="15">15 min</option><option value="30" selected>30 min</option><option value="60">hour</option></select></label>
      <button type="submit" id="find-go">Find</button>
    </form>
    <div id="who">
      <label>Title <input id="who-title" type="text" value="Meeting"></label>
      <label>Your name <input id="who-name" type="text" autocomplete="name"></label>
      <label>E-mail <input id="who-email" type="email" autocomplete="email"></label>
      <label>Phone <input id="who-phone" type="tel" autocomplete="tel"></label>
    </div>
    <div id="find-status" class="meta"></div>
    <ol id="suggestions"></ol>
    <div id="book-result" role="status" aria-live="polite"></div>
  </details>
</section>
<main><div id="week-title"></div><div id="rooms" aria-live="polite"></div></main>
<script>
(function () {
  "use strict";
  var WINDOW_FROM = 7 * 60, WINDOW_TO = 19 * 60;
  var params = new URLSearchParams(location.search);
  var state = { date: params.get("date") || "", name: params.get("name") || "", equipment: params.get("equipment") || "",
                room: params.get("room") || "", revision: -1, booking: false };
  // How a segment's tooltip names its state (others by their own name).
  var STATE_WORDS = { held: "held — awaiting confirmation", inProgress: "in use" };
  var DAYS = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
  function dayLabel(date) { var d = new Date(date + "T12:00:00"); return DAYS[d.getDay()] + " " + date; }
  function addDays(date, n) { var d = new Date(date + "T12:00:00"); d.setDate(d.getDate() + n); return iso(d); }
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
    if (state.room) { q.set("room", state.room); return q.toString(); }
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
    var week = !!state.room;
    $("week-title").className = week ? "on" : "";
    $("week-title").textContent = week ? "Week of " + (day.rooms[0] ? day.rooms[0].name : state.room) : "";
    $("all-rooms").hidden = !week;
    day.rooms.forEach(function (room) {
      var row = el("section", "row");
      row.setAttribute("data-room", room.name);
      if (week) row.setAttribute("data-date", room.date);
      var info = el("div");
      if (week) {
        info.appendChild(el("div", "name", dayLabel(room.date)));
      } else {
        // The name opens the room's week.
        var open = el("button", null, room.name);
        open.type = "button";
        open.setAttribute("data-week", room.name);
        open.onclick = function () { state.room = room.name; reload(); };
        var name = el("div", "name");
        name.appendChild(open);
        info.appendChild(name);
      }
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
        seg.title = s.from + "–" + s.to + " " + (s.reason || (s.state === "closed" && room.closed ? room.closed : (STATE_WORDS[s.state] || s.state)));
        seg.setAttribute("data-room", room.name);
        if (week) seg.setAttribute("data-date", room.date);
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
    fetch((state.room ? "api/week?" : "api/day?") + q, { cache: "no-store" }).then(function (r) { return r.json(); }).then(function (day) {
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
  $("prev").onclick = function () { shift(state.room ? -7 : -1); };
  $("next").onclick = function () { shift(state.room ? 7 : 1); };
  $("all-rooms").onclick = function () { state.room = ""; reload(); };

  // Find a room: GET /suggest, then (when the page books) POST /api/book.
  // Remembered for this tab only (sessionStorage): on a shared screen the
  // next person must not find the last one's name, e-mail and phone once
  // the browser was closed. What older pages kept for good is removed.
  var who = ["title", "name", "email", "phone"];
  who.forEach(function (k) {
    localStorage.removeItem("who-" + k);
    var saved = sessionStorage.getItem("who-" + k);
    if (saved) $("who-" + k).value = saved;
    $("who-" + k).onchange = function () { sessionStorage.setItem("who-" + k, $("who-" + k).value); };
  });
  fetch("api/page", { cache: "no-store" }).then(function (r) { return r.json(); }).then(function (p) {
    state.booking = !!p.booking;
    $("who").className = state.booking ? "on" : "";
  }).catch(function () {});
  function when(s) { return dayLabel(s.date) + " " + s.start + "–" + s.end; }
  function showSuggestions(list) {
    var ol = $("suggestions");
    ol.textContent = "";
    $("find-status").textContent = list.length ? list.length + " suggestion" + (list.length === 1 ? "" : "s") + ", earliest first" : "Nothing free matches.";
    list.forEach(function (s) {
      var li = el("li");
      ["room", "date", "start", "end"].forEach(function (k) { li.setAttribute("data-" + k, s[k]); });
      li.appendChild(el("span", "when", when(s)));
      li.appendChild(el("span", "name", s.room));
      li.appendChild(el("span", "meta", s.capacity + " people · " + s.timeZone));
      var show = el("button", "show", "Show");
      show.type = "button";
      show.onclick = function () { state.room = ""; state.date = s.date; state.name = s.room; $("name").value = s.room; reload(); };
      li.appendChild(show);
      if (state.booking) {
        var book = el("button", "book", "Book");
        book.type = "button";
        book.onclick = function () { bookIt(s, book); };
        li.appendChild(book);
      }
      ol.appendChild(li);
    });
    ol.setAttribute("data-loaded", "true");
  }
  function bookIt(s, button) {
    var body = { room: s.room, date: s.date, start: s.start, end: s.end, title: $("who-title").value,
                 name: $("who-name").value, email: $("who-email").value, phone: $("who-phone").value,
                 key: (window.crypto && crypto.randomUUID) ? crypto.randomUUID() : String(Date.now()) + Math.random() };
    var out = $("book-result");
    out.removeAttribute("data-ok");
    out.textContent = "Booking " + s.room + " " + when(s) + " …";
    button.disabled = true;
    fetch("api/book", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) })
      .then(function (r) { return r.json(); }).then(function (a) {
        out.textContent = a.message || (a.error && a.error.text) || "No answer.";
        out.setAttribute("data-ok", a.ok ? "true" : "false");
        if (a.code) out.setAttribute("data-code", a.code); else out.removeAttribute("data-code");
        button.disabled = false;
        if (a.ok) { state.room = ""; state.date = s.date; reload(); }
      }).catch(function (e) { out.textContent = "Not sent: " + e; out.setAttribute("data-ok", "false"); button.disabled = false; });
  }
  $("find-from").value = state.date || iso(new Date());
  $("find-form").onsubmit = function (e) {
    e.preventDefault();
    var from = $("find-from").value || iso(new Date());
    var q = new URLSearchParams();
    q.set("from", from);
    q.set("to", addDays(from, parseInt($("find-days").value, 10)));
    q.set("durationMinutes", $("find-duration").value);
    q.set("stepMinutes", $("find-step").value);
    var people = parseInt($("find-people").value, 10);
    if (people > 0) q.set("minCapacity", String(people));
    if ($("find-equipment").value.trim()) q.set("equipment", $("find-equipment").value.trim());
    $("suggestions").removeAttribute("data-loaded");
    $("find-status").textContent = "Searching …";
    fetch("suggest?" + q.toString(), { cache: "no-store" }).then(function (r) { return r.json(); }).then(function (a) {
      if (a.ok === false) { $("find-status").textContent = a.error.text; $("suggestions").textContent = ""; return; }
      showSuggestions(a.suggestions);
    }).catch(function (e) { $("find-status").textContent = "Not sent: " + e; });
  };
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
