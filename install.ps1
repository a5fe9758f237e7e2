# swarm-app installer for Windows: finds Python 3.11+ and hands every flag to tools\installer.py,
# which makes the venv in %LOCALAPPDATA%\swarm-app, picks the torch build and engine, and ends with
# `swarm doctor`. Needs no administrator rights. Run from a checkout or an unpacked release it installs
# that; fetched on its own it installs the published package (-From: a .whl, .tar.gz or checkout folder). Usage:
#   powershell -ExecutionPolicy Bypass -File install.ps1 [-Cpu] [-Engine NAME] [-From PATH]
#       [-TorchSpec REQ] [-DryRun] [-Table] [-Yes]
param(
    [switch]$Cpu,
    [string]$Engine,
    [string]$From,
    [string]$TorchSpec,
    [switch]$DryRun,
    [switch]$Table,
    [switch]$Yes
)
$ErrorActionPreference = "Stop"
# Where tools\installer.py is fetched from when this script runs without a checkout (irm ... | iex).
$BaseUrl = if ($env:SWARM_INSTALL_BASE_URL) { $env:SWARM_INSTALL_BASE_URL } else { "https://raw.githubusercontent.com/swarm-app/swarm-app/main" }

# Each candidate is a command and its arguments; the first one that is Python 3.11+ with venv wins.
$Candidates = @("py -3.13", "py -3.12", "py -3.11", "python3", "python")
$Python = $null
$PythonArgs = @()
foreach ($candidate in $Candidates) {
    $parts = $candidate.Split(" ")
    if (-not (Get-Command $parts[0] -ErrorAction SilentlyContinue)) { continue }
    $rest = @($parts | Select-Object -Skip 1)
    & $parts[0] @rest -c "import sys, venv; sys.exit(sys.version_info < (3, 11))" 2>$null
    if ($LASTEXITCODE -eq 0) { $Python = $parts[0]; $PythonArgs = $rest; break }
}
if (-not $Python) {
    Write-Error "swarm-app needs Python 3.11 or newer, and none was found. Install it from https://www.python.org/downloads/windows/ (tick 'Add python.exe to PATH') or with 'winget install Python.Python.3.12', then run this again."
    exit 1
}

$Installer = if ($PSScriptRoot) { Join-Path $PSScriptRoot "tools\installer.py" } else { "" }
if (-not $Installer -or -not (Test-Path $Installer)) {
    $Installer = Join-Path $env:TEMP "swarm-app-installer.py"
    Write-Host "fetching $BaseUrl/tools/installer.py"
    Invoke-WebRequest -UseBasicParsing -Uri "$BaseUrl/tools/installer.py" -OutFile $Installer
}

$Flags = @()
if ($Cpu) { $Flags += "--cpu" }
if ($Engine) { $Flags += @("--engine", $Engine) }
if ($From) { $Flags += @("--from", $From) }
if ($TorchSpec) { $Flags += @("--torch-spec", $TorchSpec) }
if ($DryRun) { $Flags += "--dry-run" }
if ($Table) { $Flags += "--table" }
if ($Yes) { $Flags += "--yes" }

& $Python @PythonArgs $Installer @Flags
exit $LASTEXITCODE
