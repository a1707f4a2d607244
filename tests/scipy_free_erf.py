"""erf in float64 without scipy (math.erf, vectorised), for test references."""

import math

import numpy as np

erf = np.vectorize(math.erf, otypes=[np.float64])
