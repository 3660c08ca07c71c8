"""Why a fresh 2 MiB page is slow to touch on this VM (measure.py beside this), and why memory freed a moment before
is not.

The lead: this VM's balloon reports free memory to the host (virtio-balloon free page reporting): a free block of
2^page_reporting_order pages that stays free for about 2 s is handed back to the host, which drops its backing. The
kernel's command line asks for page_reporting_order=11, beyond the largest order (10), which the kernel refuses, and so
reports at its default, 9: 2 MiB, exactly a huge page.

1. The machine: the reporting order, the balloon's features, what the command line asked for.
2. A 1 GiB area's first touch, on 2 MiB pages or 4 KiB, once 1 GiB touched on 4 KiB pages has been freed `wait`
   seconds before: if reporting is the cause, huge pages are fast while that memory is still the host's (0 s) and slow
   once it has been reported (over 2 s).
3. With --unbind (root; the machine is changed for the measurement's length and put back): the balloon's driver unbound,
   so that nothing is reported; 12 GiB touched on 4 KiB pages and freed, so that free memory is backed again; then
   the same touches after 6 s. If reporting is the cause, huge pages are now at least as fast as 4 KiB pages.

    .venv/bin/python results/huge-pages/reporting.py [--unbind] > results/huge-pages/<date>-reporting.txt
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from measure import GIB, first_touch  # noqa: E402

BALLOON = Path("/sys/bus/virtio/drivers/virtio_balloon")
FREE_PAGE_REPORTING = 5  # the feature bit (virtio spec, 5.5.3)


def show(label: str, seconds: float, gib: int = 1) -> None:
    print(f"   {label}: {seconds:5.2f} s, {gib * GIB / seconds / 1e9:5.2f} GB/s", flush=True)


def machine() -> None:
    order = Path("/sys/module/page_reporting/parameters/page_reporting_order")
    asked = [word for word in Path("/proc/cmdline").read_text().split() if "page_reporting" in word]
    print(f"1. kernel {Path('/proc/sys/kernel/osrelease').read_text().strip()}; command line: {' '.join(asked) or 'nothing'};"
          f" page_reporting_order now {order.read_text().strip() if order.exists() else 'absent'}")
    for device in sorted(BALLOON.glob("virtio*")):
        features = (device / "features").read_text().strip()
        print(f"   balloon {device.name}: free page reporting {'offered' if features[FREE_PAGE_REPORTING] == '1' else 'absent'}")
    thp = Path("/sys/kernel/mm/transparent_hugepage")
    print(f"   transparent huge pages: enabled {(thp / 'enabled').read_text().strip()}, defrag {(thp / 'defrag').read_text().strip()}")


def after_free(waits: tuple[float, ...]) -> None:
    print("2. 1 GiB first touch, `wait` s after 1 GiB on 4 KiB pages was freed")
    for wait in waits:
        for huge in (True, False):
            first_touch(False)  # backed memory, freed on return
            time.sleep(wait)
            show(f"wait {wait:4.1f} s, {'2 MiB' if huge else '4 KiB'} pages", first_touch(huge))


def unbound() -> None:
    devices = [device.name for device in BALLOON.glob("virtio*")]
    print(f"3. balloon driver unbound from {', '.join(devices) or 'nothing'}; 12 GiB touched on 4 KiB pages and freed first")
    for name in devices:
        (BALLOON / "unbind").write_text(name)
    try:
        show("12 GiB on 4 KiB pages", first_touch(False, gib=12), 12)
        for huge in (True, False) * 3:
            time.sleep(6)
            show(f"after 6 s, {'2 MiB' if huge else '4 KiB'} pages", first_touch(huge))
    finally:
        for name in devices:
            (BALLOON / "bind").write_text(name)
        print(f"   balloon driver bound again: {sorted(device.name for device in BALLOON.glob('virtio*'))}")


if __name__ == "__main__":
    machine()
    after_free((0.0, 0.5, 1.0, 2.0, 3.0, 6.0, 10.0))
    if "--unbind" in sys.argv[1:]:
        unbound()
