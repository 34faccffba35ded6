"""cgpkit from Python: the C++ engine itself — identical rows to cgp-sim for the same
seed, named errors, vectorized geometry, the accountants' reference values."""
import math
import json
import os
import subprocess
import tempfile
import unittest

import numpy as np

import cgpkit

SEED = 16001  # every randomized test below derives its data from this seed
print(f"[seed] test_cgpkit: {SEED}")


def points(n, seed=SEED):
    return np.random.default_rng(seed).uniform(0, 2000, (n, 2))


class Fleet(unittest.TestCase):
    def test_queries_charge_within_rho_and_answer(self):
        pts = points(3000)
        fleet = cgpkit.SimulatedFleet(pts, budget=1e-2, seed=7)
        self.assertEqual(len(fleet), 3000)
        self.assertEqual(fleet.dimension, 2)
        result = fleet.range_count(cgpkit.box([0, 0], [1000, 1000]), rho=1e-3)
        self.assertEqual(list(result["not_reached"]), [])  # an in-process fleet reaches everyone
        self.assertGreater(result["estimate"], 0)
        self.assertLessEqual(result["charged"].max(), cgpkit.device_charge(1e-3))
        self.assertTrue(np.all(fleet.spent() <= 1e-2))
        neighbours = fleet.knn([1000, 1000], k=5, rho=1e-3, method="PM1")["neighbours"]
        self.assertEqual(len(neighbours), 5)
        self.assertGreaterEqual(fleet.kde([1000, 1000], 300, 1e-3)["estimate"], -1)

    def test_same_seed_same_answer(self):
        pts = points(2000)
        answers = []
        for _ in range(2):
            fleet = cgpkit.SimulatedFleet(pts, budget=1e-2, seed=11)
            answers.append(fleet.range_count(cgpkit.ball([1000, 1000], 600), 1e-3)["estimate"])
        self.assertEqual(answers[0], answers[1])

    def test_errors_are_named(self):
        with self.assertRaises(cgpkit.Error) as caught:
            cgpkit.SimulatedFleet(points(10), budget=-1)
        self.assertEqual(caught.exception.code, "not_positive")
        self.assertEqual(caught.exception.parameter, "budget")
        fleet = cgpkit.SimulatedFleet(points(10), budget=1)
        with self.assertRaises(cgpkit.Error) as caught:
            fleet.range_count(cgpkit.box([0, 0], [1, 1]), 1e-3, method="XM9")
        self.assertIn("XM9", caught.exception.message)
        with self.assertRaises(cgpkit.Error) as caught:
            cgpkit.ball([0, 0], -3)
        self.assertEqual(caught.exception.parameter, "ball.radius")


class AccuracyFirst(unittest.TestCase):
    def test_certified_interval_holds_and_costs_at_most_the_cap(self):
        pts = points(20000)
        truth = int(np.sum(np.all(pts <= 1000, axis=1)))
        fleet = cgpkit.SimulatedFleet(pts, budget=1.0, seed=21)
        # beta = 4e-6: the interval misses the truth with probability <= beta/4 = 1e-6 (Lemma 5.2
        # and the union over rounds), the false-failure rate of this test.
        r = fleet.range_count_to_accuracy(cgpkit.box([0, 0], [1000, 1000]), cap=0.05,
                                          relative=0.1, beta=4e-6)
        self.assertTrue(r["certified"])
        self.assertLessEqual(r["lower"], truth)
        self.assertGreaterEqual(r["upper"], truth)
        self.assertLessEqual(abs(r["estimate"] - truth), 0.1 * truth)
        self.assertLessEqual(r["charged"].max(), cgpkit.device_charge(0.05) * (1 + 1e-12))
        self.assertLess(r["rounds_used"], 16)  # it stopped early: users paid less than the cap
        self.assertLess(np.mean(fleet.spent()), 0.05)
        k = fleet.kde_to_accuracy([1000, 1000], 400, cap=0.05, relative=0.2, beta=4e-6)
        self.assertLessEqual(k["lower"], k["estimate"])
        self.assertLessEqual(k["estimate"], k["upper"])
        with self.assertRaises(cgpkit.Error) as caught:
            fleet.range_count_to_accuracy(cgpkit.box([0, 0], [1, 1]), cap=0.05, relative=1.5)
        self.assertEqual(caught.exception.parameter.split(".")[-1], "relative")

    def test_threshold_on_a_count(self):
        # One curator holding a count of 30; is it below 0.5 * 100 = 50? The release's noise
        # (sigma = 1/sqrt(2 * 0.125) = 2) is 10 sigma from the margin: certain in practice, and
        # the fleet is seeded, so the answer is fixed.
        curator = cgpkit.SimulatedFleet(np.array([30.0]), budget=1.0, seed=1)
        self.assertTrue(curator.threshold(0, q=0.5, population=100, cap=0.5)["below"])
        self.assertFalse(curator.threshold(0, q=0.1, population=100, cap=0.4)["below"])
        self.assertLessEqual(curator.spent()[0], 1.0)


class Devices(unittest.TestCase):
    def test_replay_is_charged_once_and_refusal_charges_nothing(self):
        device = cgpkit.Device(budget=2e-3, seed=SEED)
        device.register_component("location", 2, "m")
        device.set_component("location", [10.0, 20.0])
        first = device.location("q1", 1, 1e-3)
        self.assertEqual(first["status"], "answered")
        self.assertEqual(first["charged_rho"], cgpkit.device_charge(1e-3))
        again = device.location("q1", 1, 1e-3)
        self.assertTrue(np.array_equal(first["values"], again["values"]))
        self.assertAlmostEqual(device.spent, first["charged_rho"], delta=1e-15)  # charged once
        refused = device.distance_to_point([0, 0], "q2", 1, 1.5e-3)
        self.assertEqual(refused["status"], "refused_budget")
        self.assertAlmostEqual(device.spent, first["charged_rho"], delta=1e-15)  # charged once
        inside = device.signed_distance_to_region(cgpkit.box([0, 0], [50, 50]), "q3", 1, 5e-4)
        self.assertEqual(inside["values"].shape, (1,))
        self.assertFalse(device.secure_randomness)

    def test_rejections_and_bad_requests_are_named(self):
        device = cgpkit.Device(budget=1.0)
        self.assertTrue(device.secure_randomness)
        rejected = device.location("q", 1, 1e-3)  # no component registered
        self.assertEqual(rejected["status"], "rejected_invalid")
        self.assertEqual(rejected["error"].code, "unknown_component")
        with self.assertRaises(cgpkit.Error) as caught:
            device.location("q", 1, -1.0)
        self.assertEqual(caught.exception.parameter, "rho")
        reply = device.handle(b"\x07 not a DeviceRequest")
        self.assertIsInstance(reply, bytes)
        self.assertGreater(len(reply), 0)
        self.assertEqual(device.spent, 0.0)
        with self.assertRaises(cgpkit.Error) as caught:
            cgpkit.Device(budget=1.0, delta=1e-6)
        self.assertEqual(caught.exception.parameter, "lam")

    def test_gps_positions_are_projected_in_the_kept_frame(self):
        device = cgpkit.Device(budget=1e4, seed=SEED)
        self.assertIsNone(device.location_frame)
        with self.assertRaises(cgpkit.Error) as caught:
            device.set_location_lonlat("location", -73.968, 40.751)  # no frame yet
        self.assertEqual(caught.exception.parameter, "frame")
        with self.assertRaises(cgpkit.Error) as caught:
            device.set_location_frame("local:-73.97")
        self.assertEqual(caught.exception.parameter, "frame")
        device.set_location_frame("local:-73.97,40.75")
        self.assertEqual(device.location_frame, "local:-73.97,40.75")
        device.set_location_lonlat("location", -73.968, 40.751)
        # About 170 m east and 110 m north of the origin; sigma = 0.07 m at rho = 100.
        values = device.location("q", 1, 100.0)["values"]
        self.assertAlmostEqual(values[0], 168.6, delta=2)
        self.assertAlmostEqual(values[1], 111.1, delta=2)
        with self.assertRaises(cgpkit.Error) as caught:
            device.set_location_lonlat("location", -73.968, 95.0)
        self.assertEqual(caught.exception.parameter, "lat")
        # ~1,780 km from the origin: placed, clamped to the 1,500 km edge of the service area
        # (never refused: a refusal would depend on where the user is).
        # (A device of budget 1 releases at sigma = 1 m within a box that holds the area.)
        traveller = cgpkit.Device(budget=1.0, seed=SEED)
        traveller.set_location_frame("local:-73.97,40.75")
        traveller.set_location_lonlat("location", -95.0, 40.75)
        values = traveller.location("q", 1, 0.5)["values"]
        self.assertAlmostEqual(math.hypot(values[0], values[1]), 1.5e6, delta=10)
        self.assertLess(values[0], -1.4e6)  # west
        with self.assertRaises(cgpkit.Error) as caught:  # devices take local frames only
            device.set_location_frame("mercator:-74")
        self.assertEqual(caught.exception.parameter, "frame.projection")
        self.assertEqual(device.location_frame, "local:-73.97,40.75")

    def test_ledger_file_survives_and_is_held_by_one_handle(self):
        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "ledger.db")
            device = cgpkit.Device(budget=1e-2, ledger=path)
            device.register_component("location", 2, "m")
            device.set_component("location", [1.0, 2.0])
            self.assertEqual(device.location("q", 1, 1e-3)["status"], "answered")
            spent = device.spent
            second = None
            try:
                second = cgpkit.Device(budget=1e-2, ledger=path)
            except cgpkit.Error as e:
                self.assertEqual(e.code, "ledger_in_use")
            if second is not None:  # opened fail-closed: refuses everything
                self.assertEqual(second.ledger_error.code, "ledger_in_use")
                del second
            del device
            reopened = cgpkit.Device(budget=1e-2, ledger=path)
            self.assertIsNone(reopened.ledger_error)
            self.assertEqual(reopened.spent, spent)


class Budgets(unittest.TestCase):
    def test_split_and_adaptive_sequence(self):
        even = cgpkit.split_budget(1e-3, 4)
        self.assertEqual(len(even), 4)
        self.assertAlmostEqual(sum(even), 1e-3, 15)
        doubling = cgpkit.split_budget(1e-3, 4, "double")
        self.assertTrue(all(b > a for a, b in zip(doubling, doubling[1:])))
        fleet = cgpkit.SimulatedFleet(points(2000), budget=1e-2, seed=5)
        regions = [cgpkit.box([0, 0], [x, x]) for x in (500, 1000, 1500, 2000)]
        results = fleet.adaptive_range_counts(regions, budget=1e-2)
        self.assertEqual(len(results), 4)
        total = sum(r["charged"] for r in results)
        self.assertTrue(np.all(total <= 1e-2 * (1 + 1e-9)))  # Alg. 3 stays within each budget
        self.assertTrue(np.allclose(fleet.spent(), total, rtol=1e-9, atol=0))


class Projection(unittest.TestCase):
    def test_projection_is_cgp_sims(self):
        rng = np.random.default_rng(SEED)
        lonlat = np.column_stack([rng.uniform(-74.02, -73.95, 800), rng.uniform(40.70, 40.78, 800)])
        xy, origin = cgpkit.project(lonlat)
        self.assertEqual(xy.shape, (800, 2))
        # Within a few km of the centre, local distances are true distances (haversine, 0.5%).
        lon0, lat0 = np.radians(origin)
        lon, lat = np.radians(lonlat[:, 0]), np.radians(lonlat[:, 1])
        h = np.sin((lat - lat0) / 2) ** 2 + np.cos(lat0) * np.cos(lat) * np.sin((lon - lon0) / 2) ** 2
        great_circle = 2 * 6371008.8 * np.arcsin(np.sqrt(h))
        self.assertTrue(np.allclose(np.hypot(xy[:, 0], xy[:, 1]), great_circle, rtol=5e-3))
        # The same frame cgp-sim uses for a lon,lat file: identical rows.
        with tempfile.TemporaryDirectory() as scratch:
            data = os.path.join(scratch, "lonlat.csv")
            np.savetxt(data, lonlat, delimiter=",", header="lon,lat", comments="", fmt="%.10f")
            from_file = cgpkit.experiments.range(rho=[1e-3], w=[1000], data=data, reps=2,
                                                 methods=["PM1"], threads=1)
            lonlat_read = np.loadtxt(data, delimiter=",", skiprows=1)
            from_array = cgpkit.experiments.range(rho=[1e-3], w=[1000],
                                                  points=cgpkit.project(lonlat_read)[0], reps=2,
                                                  methods=["PM1"], threads=1)
        for key in ("error_mean", "error_median", "privsav_mean", "released"):
            self.assertEqual(from_file[key][0], from_array[key][0], key)
        with self.assertRaises(cgpkit.Error):
            cgpkit.project(lonlat, kind="utm")


class Geometry(unittest.TestCase):
    def test_signed_distance_vectorized(self):
        square = cgpkit.polygon([(0, 0), (10, 0), (10, 10), (0, 10)], [[(4, 4), (6, 4), (6, 6), (4, 6)]])
        pts = np.array([[5.0, 1.0], [5.0, 5.0], [20.0, 5.0]])
        d = cgpkit.signed_distance(square, pts)
        self.assertEqual(d.shape, (3,))
        self.assertAlmostEqual(d[0], -1.0)  # inside, 1 from the edge
        self.assertAlmostEqual(d[1], 1.0)   # in the hole, 1 from its edge
        self.assertAlmostEqual(d[2], 10.0)  # outside
        # Points of another dimension than the region's: named, never read out of bounds.
        with self.assertRaises(cgpkit.Error) as caught:
            cgpkit.signed_distance(square, np.array([1.0, 2.0, 3.0]))
        self.assertEqual(caught.exception.code, "dimension_mismatch")
        with self.assertRaises(cgpkit.Error):
            cgpkit.signed_distance(cgpkit.box([0, 0, 0], [1, 1, 1]), pts)


class Accountants(unittest.TestCase):
    def test_reference_values(self):
        self.assertAlmostEqual(cgpkit.gaussian_rnm_epsilon(2, 0.05, 0.3, 1), 0.609710776873, 11)
        self.assertAlmostEqual(
            cgpkit.gaussian_at_alert_epsilon(0.15, 0.15 * 3 ** 0.5, 0, 1, 0.5, 2, 0.05),
            0.858073218625, 11)
        self.assertAlmostEqual(cgpkit.gaussian_selection_epsilon(30, 0.25, 1e-6), 2.2883, 4)
        self.assertGreaterEqual(cgpkit.cgp_rho_from_pure_gp(0.1), 0.005)


class Experiments(unittest.TestCase):
    KEYS = ("query", "method", "c", "split", "rho", "param", "param_name", "reps", "error_mean",
            "error_p25", "error_median", "error_p75", "privsav_mean", "privsav_median",
            "released", "seed", "n", "d", "data", "data_sha256", "projection", "beta", "noise",
            "version", "commit")

    def assert_same_rows(self, arguments, frame, rows_file):
        """cgp-sim with `arguments` writes the rows `frame` holds, key by key."""
        subprocess.run([os.environ["CGP_SIM_PATH"], *arguments, "--json", rows_file], check=True,
                       capture_output=True)
        with open(rows_file) as f:
            expected = json.load(f)
        self.assertEqual(len(frame), len(expected))
        for row, want in zip(frame.to_dict("records"), expected):
            for key in self.KEYS:
                self.assertEqual(row[key], want[key], key)

    def test_rows_identical_to_cgp_sim(self):
        if not os.environ.get("CGP_SIM_PATH"):
            self.skipTest("CGP_SIM_PATH is not set")
        with tempfile.TemporaryDirectory() as scratch:
            data = os.path.join(scratch, "points.csv")
            np.savetxt(data, points(1500), delimiter=",", header="x,y", comments="")
            rows = os.path.join(scratch, "rows.json")
            frame = cgpkit.experiments.range(rho=[1e-4, 1e-3], w=[800], data=data, reps=3,
                                             seed=5, threads=1)
            self.assert_same_rows(["range", "--data", data, "--rho", "1e-4,1e-3", "--w", "800",
                                   "--reps", "3", "--seed", "5", "--threads", "1"], frame, rows)
            frame = cgpkit.experiments.knn(rho=[1e-3], k=[3, 8], data=data, reps=2, seed=6,
                                           methods=["BM1", "PM1"], threads=1)
            self.assert_same_rows(["knn", "--data", data, "--rho", "1e-3", "--k", "3,8",
                                   "--reps", "2", "--seed", "6", "--methods", "BM1,PM1",
                                   "--threads", "1"], frame, rows)
            frame = cgpkit.experiments.multi_range(budget=1e-2, m=[4, 8], w=700, data=data,
                                                   reps=2, seed=7, n=1200, threads=1)
            self.assert_same_rows(["multi-range", "--data", data, "--budget", "1e-2", "--m",
                                   "4,8", "--w", "700", "--reps", "2", "--seed", "7", "--n",
                                   "1200", "--threads", "1"], frame, rows)
        self.assertEqual(len(frame["data_sha256"][0]), 64)

    def test_experiment_errors_are_named(self):
        with self.assertRaises(cgpkit.Error) as caught:
            cgpkit.experiments.knn(rho=[1e-3], k=[2 ** 64 - 1], points=points(50), reps=1)
        self.assertEqual(caught.exception.parameter, "k")
        with self.assertRaises(cgpkit.Error) as caught:
            cgpkit.experiments.range(rho=[1e-3], w=[100], data="/nonexistent/points.csv", reps=1)
        self.assertIn("nonexistent", caught.exception.message)
        with self.assertRaises(cgpkit.Error) as caught:
            cgpkit.experiments.range(rho=[1e-3], w=[100], points=points(50), reps=-1)
        self.assertEqual(caught.exception.parameter, "reps")


if __name__ == "__main__":
    unittest.main()
