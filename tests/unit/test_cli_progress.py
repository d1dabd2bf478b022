def test_a_long_build_step_is_shown_short_with_its_mounts_counted() -> None:
    from orchestrator.cli.progress import STEP_WIDTH, short_step

    step = (
        "Step 3/5 : RUN --mount=type=bind,source=orch,target=/tmp/orch/bin     --mount=type=bind,from=orch/wheels:79b9,"
        "source=/wheels,target=/tmp/orch/wheels     --mount=type=tmpfs,target=/tmp/orch/work     sh "
        "/tmp/orch/bin/install-venv.sh python3.11 " + "x" * 400
    )
    shown = short_step(step)
    assert shown.startswith("Step 3/5 : RUN [3 mounts] sh /tmp/orch/bin/install-venv.sh python3.11 ")
    assert len(shown) == STEP_WIDTH and shown.endswith("…")
    assert short_step("Step 4/5 : COPY app /opt/app") == "Step 4/5 : COPY app /opt/app"
