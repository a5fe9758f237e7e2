"""The Textual TUI: the only package that imports textual (tests/test_layers.py checks it).

`app.SwarmApp` draws what a session publishes (dashboard, peers, logs) and sends the user's keys back
as session requests; `state.ViewState` folds the events into what is drawn, without Textual.
"""
