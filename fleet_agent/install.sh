#!/bin/sh
# fleet-agent installer (POSIX sh). The dashboard serves it at GET /agent/install.sh with
# the placeholders filled by fleet_agent.installer.render_install_script():
#   __SITE_URL__     the dashboard's base URL, e.g. https://fleet.example.com
#   __AGENT_WHEEL__  the agent wheel's file name, served at $SITE_URL/agent/dist/<wheel>
#   __AGENT_WHEEL_SHA256__  that wheel's sha256 (hex): the download is refused unless it
#                    matches, so the wheel is as trustworthy as this script's own channel
#   __AGENT_LOCK__   the dependency lock's file name, served at $SITE_URL/agent/dist/<lock>:
#                    every dependency of the agent pinned with its wheels' sha256
#                    (fleet_agent/requirements.lock, `make agent-lock`)
#   __AGENT_LOCK_SHA256__  that lock's sha256 (hex), checked like the wheel's
#
# Install (the "add host" page shows this line with a fresh enrollment secret):
#   (umask 077 && printf '%s\n' 'fes_...' > fleet-enroll.secret) && curl -fsSL \
#     https://fleet.example.com/agent/install.sh | sudo FLEET_ENROLL_SECRET_FILE="$PWD/fleet-enroll.secret" sh; rm -f fleet-enroll.secret
# The secret travels in a 0600 file (printf is a shell builtin), never in argv (world-readable
# in /proc). Without FLEET_ENROLL_SECRET_FILE the script reads $FLEET_ENROLL_SECRET, else asks
# for the secret on the terminal (not echoed). A machine that still holds a token sends it
# when re-enrolling (replaced at once); otherwise re-enrolling a known machine waits for an
# admin's approval in Settings.
#
# Uninstall:
#   curl -fsSL https://fleet.example.com/agent/install.sh | sudo sh -s -- --uninstall
# or by hand: systemctl disable --now fleet-agent; rm -f /etc/systemd/system/fleet-agent.service;
#   rm -rf /opt/fleet-agent /etc/fleet-agent /var/lib/fleet-agent; userdel fleet-agent
# (the script first revokes the host's token with `fleet-agent revoke`; by hand, revoke it
# on the dashboard's Settings page).
#
# What it does: downloads the agent wheel and the dependency lock from the dashboard and
# checks both against the digests above (before changing anything), creates the system user
# `fleet-agent` and a venv in /opt/fleet-agent, installs the dependencies (httpx, pydantic,
# nvidia-ml-py and theirs) from the package index with `pip install --require-hashes
# --only-binary :all:` (pip refuses any file whose sha256 the lock does not list, and runs no
# package's build code as root), then the wheel with `--no-deps`, enrolls (writes /etc/fleet-agent/config.toml, mode 0600, owned
# by fleet-agent), installs and starts fleet-agent.service.
#
# Why the service has capabilities: the agent runs as the unprivileged user fleet-agent,
# but vLLM servers run as other users or in containers. Reading /proc/<pid>/environ
# (HF_HOME, HF_HUB_CACHE), /proc/<pid>/fd, /proc/<pid>/cwd and /proc/<pid>/root (the
# container's files: chat template, installed vllm dist-info) requires ptrace-read access
# to that process (proc(5), PTRACE_MODE_READ_FSCREDS): CAP_SYS_PTRACE grants it.
# CAP_DAC_READ_SEARCH lets it read the HF cache in other users' homes and
# /var/lib/docker/containers/*/config.v2.json (image name, published ports) whatever
# their modes. Both are ambient capabilities of the service only; the agent never writes
# outside /var/lib/fleet-agent. /proc mounted with hidepid=2 also needs the user added
# to the gid= group of that mount. NVML needs read/write on /dev/nvidia* (mode 0666 by
# default on NVIDIA driver installs).
#
# Test hooks: PREFIX=/tmp/x writes files under that root; DRY_RUN=1 prints the commands
# that change the system (useradd, venv, pip, enroll, systemctl) instead of running them.
# Overrides: PYTHON (default python3), FLEET_AGENT_INTERVAL (seconds, default 30).
set -eu

SITE_URL="${FLEET_SITE_URL:-__SITE_URL__}"
WHEEL="${FLEET_AGENT_WHEEL:-__AGENT_WHEEL__}"
WHEEL_SHA256="__AGENT_WHEEL_SHA256__"
LOCK="__AGENT_LOCK__"
LOCK_SHA256="__AGENT_LOCK_SHA256__"
PREFIX="${PREFIX:-}"
DRY_RUN="${DRY_RUN:-0}"
PYTHON="${PYTHON:-python3}"
INTERVAL="${FLEET_AGENT_INTERVAL:-30}"
AGENT_USER=fleet-agent
VENV=/opt/fleet-agent
CONF=/etc/fleet-agent/config.toml
STATE=/var/lib/fleet-agent
UNIT=/etc/systemd/system/fleet-agent.service

say() { printf 'fleet-agent install: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

# Run a command that changes the system, or print it under DRY_RUN=1.
run() {
    if [ "$DRY_RUN" = 1 ]; then
        printf '+ %s\n' "$*"
    else
        "$@"
    fi
}

write_unit() {
    mkdir -p "$PREFIX/etc/systemd/system"
    cat > "$PREFIX$UNIT" <<EOF
[Unit]
Description=vLLM Fleet Audit node agent
Documentation=$SITE_URL/agent/
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
User=$AGENT_USER
Group=$AGENT_USER
ExecStart=$VENV/bin/fleet-agent run --config $CONF
Restart=always
RestartSec=10
KillSignal=SIGTERM
TimeoutStopSec=30
# ptrace-read on other users' /proc/<pid>/{environ,root,cwd,fd}; read any HF cache file.
AmbientCapabilities=CAP_SYS_PTRACE CAP_DAC_READ_SEARCH
CapabilityBoundingSet=CAP_SYS_PTRACE CAP_DAC_READ_SEARCH
NoNewPrivileges=true
# CAP_SYS_PTRACE is for reading /proc/<pid>/environ; the ptrace(2), process_vm_readv(2)
# and perf_event_open(2) calls it would also allow are never needed: forbid them.
SystemCallFilter=~@debug
ProtectSystem=strict
ProtectHome=read-only
ReadWritePaths=$STATE
PrivateTmp=true

[Install]
WantedBy=multi-user.target
EOF
}

uninstall() {
    run systemctl disable --now fleet-agent.service || true
    if [ -x "$PREFIX$VENV/bin/fleet-agent" ] || [ "$DRY_RUN" = 1 ]; then
        run "$VENV/bin/fleet-agent" revoke --config "$CONF" || say "could not revoke the token; revoke it in Settings"
    fi
    rm -f "$PREFIX$UNIT"
    run systemctl daemon-reload || true
    rm -rf "$PREFIX$VENV" "$PREFIX/etc/fleet-agent" "$PREFIX$STATE"
    run userdel "$AGENT_USER" || true
    say "removed"
}

# The secret: a file (FLEET_ENROLL_SECRET_FILE), the environment, or typed on the terminal.
read_secret() {
    if [ -n "${FLEET_ENROLL_SECRET_FILE:-}" ]; then
        [ -r "$FLEET_ENROLL_SECRET_FILE" ] || die "cannot read FLEET_ENROLL_SECRET_FILE"
        return 0
    fi
    if [ -z "${FLEET_ENROLL_SECRET:-}" ] && [ "$DRY_RUN" != 1 ] && (: < /dev/tty) 2>/dev/null; then
        printf 'Enrollment secret (from the add-host page): ' > /dev/tty
        stty -echo < /dev/tty 2>/dev/null || true
        IFS= read -r FLEET_ENROLL_SECRET < /dev/tty || true
        stty echo < /dev/tty 2>/dev/null || true
        printf '\n' > /dev/tty
        export FLEET_ENROLL_SECRET
    fi
    [ -n "${FLEET_ENROLL_SECRET:-}" ] || die "no enrollment secret: set FLEET_ENROLL_SECRET_FILE or FLEET_ENROLL_SECRET (shown on the add-host page)"
}

preflight() {
    case "$SITE_URL" in
        __*|"") die "this script was served without its site URL; download it from the dashboard" ;;
    esac
    case "$WHEEL" in
        *.whl) ;;
        *) die "no agent wheel name in this script; download it from the dashboard" ;;
    esac
    if ! printf '%s' "$WHEEL_SHA256" | grep -Eq '^[0-9a-f]{64}$'; then
        die "no agent wheel sha256 in this script; download it from the dashboard"
    fi
    case "$LOCK" in
        __*|"") die "no dependency lock name in this script; download it from the dashboard" ;;
    esac
    if ! printf '%s' "$LOCK_SHA256" | grep -Eq '^[0-9a-f]{64}$'; then
        die "no dependency lock sha256 in this script; download it from the dashboard"
    fi
    read_secret
    if [ "$DRY_RUN" != 1 ] && [ "$(id -u)" -ne 0 ]; then
        die "run as root (sudo)"
    fi
    command -v "$PYTHON" >/dev/null 2>&1 || [ "$DRY_RUN" = 1 ] || die "$PYTHON not found"
}

# Refuse a download whose sha256 differs from the one the dashboard embedded in this script.
# verify <file> <expected sha256> <what>
verify() {
    if command -v sha256sum >/dev/null 2>&1; then
        got="$(sha256sum "$1" | cut -d' ' -f1)"
    else
        got="$("$PYTHON" -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1")"
    fi
    [ "$got" = "$2" ] || die "sha256 mismatch for $(basename "$1"): got $got, expected $2; not installing"
    say "$3 sha256 verified ($2)"
}

# Fetch the wheel and the lock into $tmp and check both; nothing is changed before this.
# Downloaded and checked even in a dry run: it changes nothing outside $tmp.
download() {
    curl -fsSL -o "$tmp/$WHEEL" "$SITE_URL/agent/dist/$WHEEL" || die "cannot download $WHEEL"
    verify "$tmp/$WHEEL" "$WHEEL_SHA256" wheel
    curl -fsSL -o "$tmp/$LOCK" "$SITE_URL/agent/dist/$LOCK" || die "cannot download $LOCK"
    verify "$tmp/$LOCK" "$LOCK_SHA256" "dependency lock"
}

install_agent() {
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    download
    if ! id "$AGENT_USER" >/dev/null 2>&1; then
        run useradd --system --home-dir "$STATE" --shell /usr/sbin/nologin "$AGENT_USER"
    fi
    mkdir -p "$PREFIX$STATE/spool" "$PREFIX/etc/fleet-agent"
    # Reports (redacted, but about this node) are readable by the agent's user only.
    chmod 0700 "$PREFIX$STATE" "$PREFIX$STATE/spool"
    run "$PYTHON" -m venv "$VENV"
    # Exactly the pinned dependencies, each file checked against the lock's sha256 list;
    # then the agent itself, whose dependencies are already there (--no-deps: none unpinned).
    run "$VENV/bin/pip" install --quiet --require-hashes --only-binary :all: -r "$tmp/$LOCK"
    run "$VENV/bin/pip" install --quiet --upgrade --no-deps "$tmp/$WHEEL"
    # The secret stays in a file or the environment of this one command, never in argv.
    if [ -n "${FLEET_ENROLL_SECRET_FILE:-}" ]; then
        run "$VENV/bin/fleet-agent" enroll --server "$SITE_URL" --config "$CONF" \
            --interval "$INTERVAL" --secret-file "$FLEET_ENROLL_SECRET_FILE"
    else
        run "$VENV/bin/fleet-agent" enroll --server "$SITE_URL" --config "$CONF" \
            --interval "$INTERVAL"
    fi
    run chown -R "$AGENT_USER:$AGENT_USER" "$STATE" "/etc/fleet-agent"
    write_unit
    run systemctl daemon-reload
    run systemctl enable --now fleet-agent.service
    say "installed; check with: systemctl status fleet-agent; $VENV/bin/fleet-agent status --config $CONF"
}

# A dry run writes files only under a scratch root, never into the real /etc.
if [ "$DRY_RUN" = 1 ] && [ -z "$PREFIX" ]; then
    die "DRY_RUN=1 needs PREFIX=<scratch directory>"
fi

if [ "${1:-}" = "--uninstall" ]; then
    uninstall
else
    preflight
    install_agent
fi
