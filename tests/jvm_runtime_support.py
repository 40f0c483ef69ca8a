"""How pytest drives the Kotlin SDK (client_sdk/jvm), as tests/js_runtime_support.py drives npm.

- ``maven_or_skip()``: skips, saying why, where java or mvn is missing or Maven Central cannot
  be reached and nothing is cached (``.ci/run`` resolves the build's dependencies first);
- ``mvn(*goals)``: one Maven run in client_sdk/jvm (batch mode, quiet), its output returned;
- ``built_jvm_sdk()``: the jar, the compiled tests and the test classpath, built once per session,
  for the end-to-end drivers started with ``java -cp`` (client_sdk/jvm/src/test/kotlin/.../e2e).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
JVM = ROOT / "client_sdk" / "jvm"
VERSION = "0.1.0"
JAR = JVM / "target" / f"ldp-telemetry-sdk-{VERSION}.jar"
#: Messages of a Maven run that could not download what the build needs (offline, no cache).
_UNRESOLVED = ("Could not resolve", "Could not transfer", "Non-resolvable", "Unknown host", "Plugin .* could not be resolved")


def maven_or_skip() -> str:
    """The mvn executable (skips with the reason when java or mvn is missing)."""
    mvn, java = shutil.which("mvn"), shutil.which("java")
    if mvn is None or java is None:
        pytest.skip("java (JDK >= 11) and mvn (Maven 3) are needed for the JVM SDK's tests")
    return mvn


def mvn(*goals: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """``mvn -B -q GOALS`` in client_sdk/jvm; skips when its dependencies cannot be resolved."""
    exe = maven_or_skip()
    env = {**os.environ, "MAVEN_OPTS": os.environ.get("MAVEN_OPTS", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")}
    done = subprocess.run([exe, "-B", "-q", f"-Dldpt.repo={ROOT}", *goals], cwd=JVM, capture_output=True,
                          text=True, timeout=timeout, env=env)
    if done.returncode != 0 and any(word in done.stdout + done.stderr for word in _UNRESOLVED):
        pytest.skip("Maven could not resolve the JVM SDK's build (no access to Maven Central and nothing "
                    f"cached; .ci/run resolves it): {(done.stdout + done.stderr).strip()[-400:]}")
    return done


#: Goals that also write the test classpath the drivers run with (tests/test_jvm_sdk.py adds them to `verify`).
CLASSPATH_GOALS = ("dependency:build-classpath", "-Dmdep.includeScope=test",
                   f"-Dmdep.outputFile={JVM / 'target' / 'classpath.txt'}")


def _up_to_date() -> bool:
    """The jar, the compiled tests and the classpath are newer than every source and the pom."""
    outputs = [JAR, JVM / "target" / "classpath.txt", JVM / "target" / "test-classes"]
    if not all(p.exists() for p in outputs):
        return False
    sources = [JVM / "pom.xml", *(f for f in (JVM / "src").rglob("*") if f.is_file())]
    return max(f.stat().st_mtime for f in sources) < min(p.stat().st_mtime for p in outputs)


@functools.cache
def _build() -> tuple[str, str]:
    """(problem text or "", classpath): `mvn package` without running the tests (unless a build
    of these very sources is there, e.g. from tests/test_jvm_sdk.py's `mvn verify`), then the test classpath."""
    if not _up_to_date():
        done = mvn("-DskipTests", "package", *CLASSPATH_GOALS)
        if done.returncode != 0:
            return done.stdout[-4000:] + done.stderr[-2000:], ""
    deps = (JVM / "target" / "classpath.txt").read_text(encoding="utf-8").strip()
    return "", os.pathsep.join([str(JVM / "target" / "classes"), str(JVM / "target" / "test-classes"), deps])


def built_jvm_sdk() -> str:
    """The classpath of the built SDK and its test classes (built once per test session)."""
    problem, classpath = _build()
    assert not problem, f"mvn package failed:\n{problem}"
    return classpath


def java(classpath: str, main: str, *args: str, **kwargs) -> subprocess.Popen:
    """A JVM running ``main`` of the SDK's test classes (stdout: one JSON document)."""
    return subprocess.Popen(["java", "-XX:+UseSerialGC", "-cp", classpath, main, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
